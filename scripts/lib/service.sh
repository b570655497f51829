# Shared by the local-stack scripts: messages and the "start|stop|status [--port N] [--dir D]"
# command line. The caller sets me, DEFAULT_PORT and DEFAULT_DIR, then calls
# service_parse_args "$@", which sets verb, opt_port and opt_dir.
# shellcheck shell=bash

die() { echo "$me: error: $*" >&2; exit 1; }
info() { echo "$me: $*"; }

usage() {
  cat <<EOF
usage: $(basename -- "$0") start|stop|status [--port N] [--dir D]
  defaults: --port <recorded in dir, else $DEFAULT_PORT>  --dir $DEFAULT_DIR
EOF
}

valid_port() { [[ "$1" =~ ^[0-9]{1,5}$ ]] && ((10#$1 >= 1 && 10#$1 <= 65535)); }

service_parse_args() {
  verb="" opt_port="" opt_dir=""
  while (($#)); do
    case "$1" in
      --port) (($# >= 2)) || die "--port needs a value"; opt_port="$2"; shift 2 ;;
      --port=*) opt_port="${1#--port=}"; shift ;;
      --dir) (($# >= 2)) || die "--dir needs a value"; opt_dir="$2"; shift 2 ;;
      --dir=*) opt_dir="${1#--dir=}"; shift ;;
      -h|--help|help) usage; exit 0 ;;
      start|stop|status)
        [ -z "$verb" ] || die "more than one command given ('$verb' and '$1')"
        verb="$1"; shift ;;
      *) usage >&2; die "unknown argument '$1'" ;;
    esac
  done
  [ -n "$verb" ] || { usage >&2; exit 2; }
}
