# shellcheck shell=bash
# The wheels of the sdist-only dependencies (SDIST_ONLY of scripts/lib/pins.sh: fast-downward-
# textworld, jericho; a compile of minutes each), kept in one folder of this machine so that each
# is built once: scripts/setup_env.sh builds them there and installs from it, and
# scripts/wheelhouse.sh and scripts/slime_wheelhouse.sh --env-wheels take them from it instead of
# compiling again. They are pure-Python wheels whose shared object, loaded through ctypes, was
# compiled on this machine: fit for its glibc and newer ones, whatever the Python version.
# Sourced:  source "$ROOT/scripts/lib/sdist_wheels.sh"
#   SDIST_WHEELS     the folder: $EVOLVING_RL_WHEELS, default ~/.cache/evolving_rl/wheels
#   sdist_wheel PIN  prints the folder's wheel of PIN (name==version); status 1 when it has none
SDIST_WHEELS="${EVOLVING_RL_WHEELS:-${XDG_CACHE_HOME:-$HOME/.cache}/evolving_rl/wheels}"

sdist_wheel() {  # PIN
    local name="${1%%==*}" found
    [ "$name" != "$1" ] || return 1
    found="$(compgen -G "$SDIST_WHEELS/${name//-/_}-${1#*==}-*.whl" | head -n 1)" || true
    [ -n "$found" ] && echo "$found"
}
