#!/bin/sh
# serve-lb.sh — scale-out on one machine: nginx (Debian package, an unprivileged process on a high
# port) balancing two qvoice-server processes on 127.0.0.1 that share one voices directory.
# It uploads a voice through the balancer, synthesizes with it on the backend that did not store
# it, then runs a series of requests through the balancer and kills one backend (SIGKILL) in the
# middle: every request must still succeed. Health checks, both kinds:
# - passive (nginx itself): a refused or broken connection, a 502/503 or a 2 s connect timeout
#   marks the backend failed for 10 s (max_fails=1) and the request goes to the other one
#   (proxy_next_upstream, at most 2 tries);
# - active (scripts/serve-lb-check.sh beside nginx): GET /ready of each backend every second; a
#   backend that fails it is marked `down` in the upstream file and nginx reloads, so requests
#   stop reaching it at all; when it is ready again it is put back.
# Then backend 1 is restarted on its port: the checker puts it back and it serves again.
# Prints one line per step; exit 0 when all held.
#
# usage: scripts/serve-lb.sh [MODEL_DIR]     (default $QVOICE_CACHE/tiny-cv; needs bin/ built)
set -eu
cd "$(dirname "$0")/.."
MODEL=${1:-${QVOICE_CACHE:-cache}/tiny-cv}
N_REQUESTS=${N_REQUESTS:-8}
command -v nginx >/dev/null || PATH=$PATH:/usr/sbin
command -v nginx >/dev/null || { echo "serve-lb: nginx not found (apt-get install nginx-light)" >&2; exit 1; }
[ -x bin/qvoice-server ] && [ -x bin/clone ] || { echo "serve-lb: build first (make)" >&2; exit 1; }

W=$(mktemp -d /tmp/qvoice-lb.XXXXXX)
chmod 755 "$W"
mkdir -p "$W/voices" "$W/nginx"
PIDS=""
cleanup() {
  for p in $PIDS; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start_backend() { # NAME [PORT] -> prints its port
  : > "$W/$1.log"
  bin/qvoice-server -m "$MODEL" --voices "$W/voices" --max-connections-per-ip 256 --listen "127.0.0.1:${2:-0}" >/dev/null 2>"$W/$1.log" &
  echo $! > "$W/$1.pid"
  for _ in $(seq 300); do
    port=$(sed -n 's/.*listening on .*:\([0-9]*\)$/\1/p' "$W/$1.log")
    [ -n "$port" ] && { echo "$port"; return 0; }
    sleep 0.1
  done
  echo "serve-lb: backend $1 did not start:" >&2; cat "$W/$1.log" >&2; return 1
}

P1=$(start_backend b1); PIDS="$PIDS $(cat "$W/b1.pid")"
P2=$(start_backend b2); PIDS="$PIDS $(cat "$W/b2.pid")"
LB=$(free_port)
# the upstream servers: written here, then rewritten by the active checker
printf 'server 127.0.0.1:%s max_fails=1 fail_timeout=10s;\n' "$P1" "$P2" > "$W/nginx/upstream.conf"
cat > "$W/nginx/nginx.conf" <<EOF
daemon off;
worker_processes 1;
pid $W/nginx/nginx.pid;
error_log $W/nginx/error.log warn;
events { worker_connections 256; }
http {
  access_log $W/nginx/access.log;
  client_body_temp_path $W/nginx/body;
  proxy_temp_path $W/nginx/proxy;
  fastcgi_temp_path $W/nginx/fastcgi;
  uwsgi_temp_path $W/nginx/uwsgi;
  scgi_temp_path $W/nginx/scgi;
  upstream qvoice {
    include $W/nginx/upstream.conf;
    keepalive 8;
  }
  server {
    listen 127.0.0.1:$LB;
    client_max_body_size 25m;
    location / {
      proxy_pass http://qvoice;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;               # streamed audio and SSE leave as they are decoded
      proxy_read_timeout 120s;
      proxy_connect_timeout 2s;          # a backend that does not accept is failed fast
      # synthesis has no side effect and uploads are content-addressed: safe to retry. A 503
      # is a draining backend; a 429 (queue full) goes back to the client with its Retry-After
      proxy_next_upstream error timeout http_502 http_503 non_idempotent;
      proxy_next_upstream_tries 2;
    }
  }
}
EOF
if [ "$(id -u)" = 0 ]; then # run unprivileged even when started as root
  chown -R nobody "$W/nginx"
  setpriv --reuid=nobody --regid=nogroup --clear-groups nginx -c "$W/nginx/nginx.conf" -e "$W/nginx/error.log" &
else
  nginx -c "$W/nginx/nginx.conf" -e "$W/nginx/error.log" &
fi
PIDS="$PIDS $!"
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$LB/health" >/dev/null && break; sleep 0.1; done
echo "serve-lb: nginx 127.0.0.1:$LB -> backends 127.0.0.1:$P1, 127.0.0.1:$P2 (voices $W/voices)"
scripts/serve-lb-check.sh "$W/nginx/upstream.conf" "$W/nginx/nginx.conf" "127.0.0.1:$P1" "127.0.0.1:$P2" \
  > "$W/check.log" 2>&1 &
PIDS="$PIDS $!"

# 1. a voice uploaded through the balancer, spoken on the backend that did not store it
bin/clone -m "${MODEL%-cv}-base" tests/audio/en_ohenry_chenevert.wav -o "$W/lb.qvoice" -n lbvoice \
  --consent "serve-lb test" >/dev/null 2>&1 || cp voices/ohenry.qvoice "$W/lb.qvoice"
code=$(curl -s -o "$W/up.json" -w '%{http_code}' -F audio_sample=@"$W/lb.qvoice" -F name=lbvoice \
  -F consent="serve-lb test" "http://127.0.0.1:$LB/v1/audio/voices")
[ "$code" = 200 ] || { echo "serve-lb: upload through nginx: HTTP $code $(cat "$W/up.json")" >&2; exit 1; }
if grep -q "POST /v1/audio/voices 200" "$W/b1.log"; then other=$P2; else other=$P1; fi
code=$(curl -s -o "$W/other.wav" -w '%{http_code}' -d '{"input":"Stored on one, spoken on the other.","voice":"lbvoice","max_seconds":2}' \
  "http://127.0.0.1:$other/v1/audio/speech")
[ "$code" = 200 ] || { echo "serve-lb: synthesis on the other backend: HTTP $code" >&2; exit 1; }
echo "serve-lb: voice uploaded through nginx, spoken by the other backend (127.0.0.1:$other): $(stat -c %s "$W/other.wav") bytes"

# 2. requests through the balancer; backend 1 killed halfway
ok=0
for i in $(seq "$N_REQUESTS"); do
  if [ "$i" = $((N_REQUESTS / 2 + 1)) ]; then
    kill -9 "$(cat "$W/b1.pid")"; echo "serve-lb: killed backend 1 (SIGKILL)"
  fi
  code=$(curl -s -o "$W/r$i.wav" -w '%{http_code}' --max-time 120 \
    -d "{\"input\":\"Request number $i.\",\"voice\":\"lbvoice\",\"max_seconds\":1,\"seed\":$i}" \
    "http://127.0.0.1:$LB/v1/audio/speech")
  [ "$code" = 200 ] && ok=$((ok + 1))
  echo "serve-lb: request $i: HTTP $code"
done
echo "serve-lb: $ok/$N_REQUESTS requests succeeded through nginx with one backend killed"
[ "$ok" = "$N_REQUESTS" ] || exit 1
for _ in $(seq 50); do grep -q "down" "$W/check.log" && break; sleep 0.1; done
sed 's/^/  /' "$W/check.log"
echo "serve-lb: nginx logged $(grep -c 'upstream: "http://127.0.0.1:'"$P1" "$W/nginx/error.log" || true) failed attempt(s) on backend 1 (each retried on backend 2: the passive check) before the checker took it out"
grep -q "127.0.0.1:$P1 down" "$W/check.log" || { echo "serve-lb: the active checker did not mark backend 1 down" >&2; exit 1; }

# 3. backend 1 back on its port: the checker puts it back, and it serves again
P1b=$(start_backend b1 "$P1"); PIDS="$PIDS $(cat "$W/b1.pid")"
for _ in $(seq 100); do grep -q "127.0.0.1:$P1 up again" "$W/check.log" && break; sleep 0.1; done
grep -q "127.0.0.1:$P1 up again" "$W/check.log" || { echo "serve-lb: the checker did not put backend 1 back" >&2; exit 1; }
echo "serve-lb: backend 1 restarted on 127.0.0.1:$P1b; $(grep "up again" "$W/check.log")"
back=0
for i in 1 2 3 4; do
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 120 \
    -d "{\"input\":\"After the restart, $i.\",\"voice\":\"lbvoice\",\"max_seconds\":1}" \
    "http://127.0.0.1:$LB/v1/audio/speech")
  [ "$code" = 200 ] || { echo "serve-lb: request after the restart: HTTP $code" >&2; exit 1; }
done
back=$(grep -c "POST /v1/audio/speech 200" "$W/b1.log" || true)
echo "serve-lb: 4/4 requests after the restart, $back of them served by the restarted backend 1"
[ "$back" -gt 0 ]
