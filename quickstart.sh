#!/usr/bin/env bash
# cmwq quick start, for a fresh Debian 12 machine.
#
#   ./quickstart.sh demo   install what is missing, build, start cmwqd on a
#                          private socket and show concurrency management live
#   ./quickstart.sh test   install what is missing, build, run the whole test
#                          suite: a normal build (-Werror) with the end-to-end
#                          tier (a Debian 12 container, tests/e2e/README.md)
#                          and an AddressSanitizer + UndefinedBehaviorSanitizer
#                          build, then "make distcheck"
#
# Both need root for apt-get (they use sudo when not root) and run as root so
# that the tests can submit work as other users.
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")"
top=$PWD

packages=(
        build-essential autoconf automake libtool pkg-config
        libsystemd-dev libevent-dev libprotobuf-c-dev protobuf-c-compiler check
        util-linux procps
        bash-completion     # its pkg-config file says where the completion goes
        zsh                 # the zsh completion's test runs compinit in a zsh
        prometheus          # promtool, which checks the metrics "cmwqctl stats --format=openmetrics" prints
        dbus-daemon python3-dbusmock    # the suspend tests: a private system bus with a mock logind
        systemd debootstrap debian-archive-keyring systemd-container    # units' tests, end-to-end tier, busctl (D-Bus tests)
        debhelper lintian   # the end-to-end tier builds the Debian packages (debian/) and checks them
        libuv1-dev      # a peer of "make bench" only
        libglib2.0-dev  # the GLib example (examples/glib.c, run by the tests) and a peer of "make bench"
)

log() { printf '\033[1m==> %s\033[0m\n' "$*"; }

install_deps() {
        local missing=() p sudo=
        for p in "${packages[@]}"; do
                dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
        done
        ((${#missing[@]})) || return 0
        [ "$(id -u)" -eq 0 ] || sudo=sudo
        log "Installing ${missing[*]}"
        $sudo apt-get update -q
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# The configure arguments build directory DIR was configured with, as
# config.status says them (without -q, quotes removed); empty if none.
configured_args() {
        [ -f "$1/Makefile" ] && [ -x "$1/config.status" ] || return 0
        (cd "$1" && ./config.status --config) | sed "s/'//g"
}

# build DIR [CONFIGURE-ARGS...]: DIR configured with exactly these arguments
# (a directory configured otherwise, by "demo" or by hand, is configured
# again from scratch), then built.
build() {
        local dir=$1 have
        shift
        [ -x configure ] || { log "Generating the build system"; ./autogen.sh; }
        mkdir -p "$dir"
        have=$(configured_args "$dir")
        if [ ! -f "$dir/Makefile" ] || [ "$have" != "$*" ]; then
                if [ -f "$dir/Makefile" ]; then
                        log "Reconfiguring $dir: it was configured with '$have', not '$*'"
                        (cd "$dir" && make -s distclean >/dev/null 2>&1) || true
                fi
                (cd "$dir" && "$top/configure" -q "$@")
        fi
        log "Building in $dir ($*)"
        (cd "$dir" && make -j"$(nproc)" -s)
}

# Prints "PASS FAIL" counted from an automake test-suite.log.
count_results() {
        local log=$1 pass fail error xpass
        pass=$(sed -n 's/^# PASS: *//p' "$log" | head -1)
        fail=$(sed -n 's/^# FAIL: *//p' "$log" | head -1)
        error=$(sed -n 's/^# ERROR: *//p' "$log" | head -1)
        xpass=$(sed -n 's/^# XPASS: *//p' "$log" | head -1)
        echo "${pass:-0} $((${fail:-0} + ${error:-0} + ${xpass:-0}))"
}

run_tests() {
        local passed=0 failed=0 status=0 p f dir
        # The end-to-end tier (a systemd-nspawn container) runs once, in the
        # normal build: it tests the installed system, not memory errors.
        build build --enable-werror --enable-e2e
        build build-asan --enable-sanitizers --enable-werror
        for dir in build build-asan; do
                log "make check in $dir"
                rm -f "$dir/test-suite.log"
                (cd "$dir" && make -j"$(nproc)" check) || status=1
                if [ -f "$dir/test-suite.log" ]; then
                        read -r p f < <(count_results "$dir/test-suite.log")
                else
                        p=0 f=1
                fi
                passed=$((passed + p)) failed=$((failed + f))
        done
        log "make distcheck"
        if (cd build && make -s distcheck >distcheck.log 2>&1); then
                passed=$((passed + 1))
        else
                tail -50 build/distcheck.log
                failed=$((failed + 1)) status=1
        fi
        echo
        echo "$passed passed, $failed failed"
        return $status
}

run_demo() {
        # Any configuration of build/ serves the demo ("test" configures it
        # for the tests): configure it only if nothing has.
        if [ -f build/Makefile ]; then
                log "Building in build (configured with '$(configured_args build)')"
                (cd build && make -j"$(nproc)" -s)
        else
                build build
        fi
        (cd build && make -s tests/integration/probe tests/demo-callbacks)
        exec "$top/tests/demo.sh" "$top/build"
}

case "${1:-}" in
demo) install_deps; run_demo ;;
test) install_deps; run_tests ;;
*)
        echo "usage: $0 demo|test" >&2
        exit 2
        ;;
esac
