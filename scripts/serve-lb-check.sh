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
state=""  # " host:port=CODE ..." of the last poll (CODE: the HTTP status of /ready, 000: none)
while :; do
  polled=""
  for b in "$@"; do
    polled="$polled $b=$(curl -s -o /dev/null --max-time 2 -w '%{http_code}' "http://$b/ready")"
  done
  changed="" news=""
  for p in $polled; do # a change is from 200 to anything else, or back
    b=${p%=*} code=${p#*=}
    case " $state " in *" $b=200 "*) was=up ;; *" $b="*) was=down ;; *) was=new ;; esac
    if [ "$code" = 200 ]; then now=up; else now=down; fi
    [ "$was" = "$now" ] && continue
    if [ "$was" = new ]; then news="$news $p"; else changed="$changed $p"; fi
  done
  state=$polled
  if [ -n "$changed$news" ]; then
    : > "$file.new"
    for p in $state; do
      down=""; [ "${p#*=}" = 200 ] || down=" down"
      echo "server ${p%=*} max_fails=1 fail_timeout=10s$down;" >> "$file.new"
    done
    mv "$file.new" "$file"
    nginx -c "$conf" -s reload 2>/dev/null
    for p in $changed; do
      if [ "${p#*=}" = 200 ]; then
        echo "serve-lb-check: ${p%=*} up again; nginx reloaded"
      else
        echo "serve-lb-check: ${p%=*} down (GET /ready: ${p#*=}); nginx reloaded"
      fi
    done
  fi
  sleep "$interval"
done
