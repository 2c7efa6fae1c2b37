#!/bin/sh
# serve-lb-check.sh — an active health checker for an open-source nginx in front of qvoice-servers
# (nginx Plus has `health_check`; the open-source nginx only learns from failed requests). Every
# QV_CHECK_INTERVAL seconds (default 1) it asks each backend for GET /ready (time limit 2 s). A
# backend that does not answer 200 (dead, hung, or draining after SIGTERM: 503) is written as
# `down` into UPSTREAM_FILE, which the nginx config includes inside its upstream block, and nginx
# reloads; a backend that answers 200 again is put back the same way. The passive checks stay
# (max_fails, proxy_next_upstream): they cover the second between two polls.
# One line on stdout per change. Runs until killed.
#
# usage: scripts/serve-lb-check.sh UPSTREAM_FILE NGINX_CONF HOST:PORT...
set -u
[ $# -ge 3 ] || { echo "usage: $0 UPSTREAM_FILE NGINX_CONF HOST:PORT..." >&2; exit 2; }
file=$1 conf=$2
shift 2
command -v nginx >/dev/null || PATH=$PATH:/usr/sbin
interval=${QV_CHECK_INTERVAL:-1}
state="" # "host:port=up|down ..." as last written
write() { # the upstream servers, with `down` on those that failed their check
  : > "$file.new"
  for b in "$@"; do
    case " $state " in *" $b=down "*) d=" down" ;; *) d="" ;; esac
    echo "server $b max_fails=1 fail_timeout=10s$d;" >> "$file.new"
  done
  mv "$file.new" "$file"
}
first=1
while :; do
  new=""
  for b in "$@"; do
    code=$(curl -s -o /dev/null --max-time 2 -w '%{http_code}' "http://$b/ready" 2>/dev/null)
    if [ "$code" = 200 ]; then new="$new $b=up"; else new="$new $b=down"; fi
    [ "$code" = 200 ] || eval "why_$(echo "$b" | tr -c 'a-zA-Z0-9\n' _)=$code"
  done
  new=${new# }
  if [ "$new" != "$state" ]; then
    old=$state
    state=$new
    write "$@"
    if [ $first = 0 ]; then
      nginx -c "$conf" -s reload 2>/dev/null
      for s in $state; do
        case " $old " in *" $s "*) ;; *)
          b=${s%=*}
          if [ "${s#*=}" = down ]; then
            eval "c=\$why_$(echo "$b" | tr -c 'a-zA-Z0-9\n' _)"
            echo "serve-lb-check: $b down (GET /ready: ${c:-000}); nginx reloaded"
          else
            echo "serve-lb-check: $b up again; nginx reloaded"
          fi ;;
        esac
      done
    fi
  fi
  first=0
  sleep "$interval"
done
