# shellcheck shell=bash
# `-h` or `--help` among a launcher's arguments: print the launcher's header comment (after the
# shebang, up to the first code line) as its usage text and exit 0, before anything is set up,
# written or started. Sourced first thing:  source "$ROOT/scripts/lib/usage.sh" "$@"
for usage_arg in "$@"; do
    case "$usage_arg" in
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
                   exit 0 ;;
    esac
done
unset usage_arg
