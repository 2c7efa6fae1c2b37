#!/usr/bin/env python3
"""client.py - Python standard-library clients for tests/unit/test_server.c.

usage: client.py PORT upload FILE [field=value ...]   multipart POST /v1/audio/voices (http.client)
       client.py PORT truncated FILE                  the same body cut before its closing boundary
       client.py PORT slow                            sends half a request line, then waits for the
                                                      server to drop the connection (reading any reply)
       client.py PORT slowbody                        sends a speech request's headers and a tenth of
                                                      its body, then waits for the server to drop it
       client.py PORT trickle N ADDRS SECONDS PROBE_PORT
                                                      N sockets from ADDRS source addresses
                                                      (127.0.0.2...) each send a request line and
                                                      then a header byte every 0.25 s, and reconnect
                                                      when cut, for SECONDS; meanwhile GET /health
                                                      every 0.25 s on PROBE_PORT and on PORT
       client.py PORT disconnect JSON                 POST /v1/audio/speech, read the first bytes of
                                                      the streamed body, then close the socket
       client.py PORT batch JSON                      POST /v1/audio/speech/batch; prints a JSON
                                                      summary: the status, total, succeeded,
                                                      failed, and per result its status and the
                                                      decoded audio's length (or its error)
Prints "STATUS BODY" (upload, truncated; slow, slowbody when the server replied before closing), a
JSON summary (trickle, batch), "closed" (slow, slowbody: no reply) or "read N" (disconnect); exit
0, or 1 when the server did not behave (slow, slowbody: still open after 30 s).
"""
import base64
import http.client
import json
import os
import socket
import sys
import threading
import time
import uuid


def multipart(path, fields):
    boundary = uuid.uuid4().hex
    parts = []
    for k, v in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode())
    with open(path, 'rb') as f:
        data = f.read()
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="audio_sample"; '
                 f'filename="{os.path.basename(path)}"\r\nContent-Type: application/octet-stream\r\n\r\n'
                 .encode() + data + b'\r\n')
    return boundary, b''.join(parts), f'--{boundary}--\r\n'.encode()


def post(port, body, boundary, close_early=False):
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=60)
    headers = {'Content-Type': f'multipart/form-data; boundary={boundary}'}
    if os.environ.get('QV_API_KEY'):
        headers['Authorization'] = 'Bearer ' + os.environ['QV_API_KEY']
    c.request('POST', '/v1/audio/voices', body=body, headers=headers)
    r = c.getresponse()
    print(r.status, r.read().decode(errors='replace'))
    c.close()


def probe(port, stop, out):
    """GET /health every 0.25 s until stop is set: out gets [answered, sent, slowest s]."""
    while not stop.is_set():
        t = time.monotonic()
        out[1] += 1
        try:
            c = http.client.HTTPConnection('127.0.0.1', port, timeout=5)
            c.request('GET', '/health')
            if c.getresponse().status == 200:
                out[0] += 1
                out[2] = max(out[2], time.monotonic() - t)
            c.close()
        except OSError:
            pass
        stop.wait(max(0.0, 0.25 - (time.monotonic() - t)))


def trickle(port, n, addrs, seconds, probe_port):
    """Slow sockets (bounded: n of them, seconds long, loopback only) while probes run."""
    end = time.monotonic() + seconds
    stop = threading.Event()
    main_p, side_p = [0, 0, 0.0], [0, 0, 0.0]
    probes = [threading.Thread(target=probe, args=(port, stop, main_p)),
              threading.Thread(target=probe, args=(probe_port, stop, side_p))]
    for t in probes:
        t.start()
    socks = [None] * n  # [socket, opened at, source address]
    longest, cut, opened, peak = 0.0, 0, 0, {}
    while time.monotonic() < end:
        alive = {}
        for i in range(n):
            if socks[i] is None:
                src = '127.0.0.%d' % (2 + i % addrs)
                try:
                    s = socket.create_connection(('127.0.0.1', port), timeout=1,
                                                 source_address=(src, 0))
                    s.setblocking(False)
                    s.send(b'GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ')
                    socks[i] = [s, time.monotonic(), src]
                    opened += 1
                except OSError:
                    continue
            s, t0, src = socks[i]
            closed = False
            try:
                closed = s.recv(4096) == b''
            except BlockingIOError:
                pass
            except OSError:
                closed = True
            if not closed:
                try:
                    s.send(b'x')
                except BlockingIOError:
                    pass
                except OSError:
                    closed = True
            if closed:
                longest = max(longest, time.monotonic() - t0)
                cut += 1
                s.close()
                socks[i] = None
            elif time.monotonic() - t0 > 0.5:  # held, not refused at once
                alive[src] = alive.get(src, 0) + 1
        for a, k in alive.items():
            peak[a] = max(peak.get(a, 0), k)
        time.sleep(0.25)
    for x in socks:
        if x:
            longest = max(longest, time.monotonic() - x[1])
            x[0].close()
    stop.set()
    for t in probes:
        t.join()
    print(json.dumps({'opened': opened, 'cut': cut, 'longest_s': round(longest, 2),
                      'peak_per_address': max(peak.values()) if peak else 0,
                      'probe_port': side_p, 'main_port': main_p}))
    return 0


def main():
    port, mode = int(sys.argv[1]), sys.argv[2]
    if mode in ('upload', 'truncated'):
        fields = dict(a.split('=', 1) for a in sys.argv[4:])
        boundary, body, end = multipart(sys.argv[3], fields)
        # truncated: the file part never ends (no closing boundary), the length is exact
        post(port, body if mode == 'truncated' else body + end, boundary)
        return 0
    if mode in ('slow', 'slowbody'):
        s = socket.create_connection(('127.0.0.1', port), timeout=30)
        if mode == 'slow':
            s.sendall(b'GET /heal')
        else:
            s.sendall(b'POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n'
                      b'Content-Length: 100\r\n\r\n{"input":')
        got = b''
        try:
            while True:
                b = s.recv(4096)
                if not b:
                    break
                got += b
        except socket.timeout:
            return 1
        except OSError:
            pass  # reset after the reply
        finally:
            s.close()
        if not got:
            print('closed')
        else:  # the reply the server sent before closing: "STATUS BODY"
            head, _, body = got.partition(b'\r\n\r\n')
            print(head.split(b' ')[1].decode(), body.decode(errors='replace'))
        return 0
    if mode == 'trickle':
        return trickle(port, int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]),
                       int(sys.argv[6]))
    if mode == 'disconnect':
        c = http.client.HTTPConnection('127.0.0.1', port, timeout=60)
        c.request('POST', '/v1/audio/speech', body=sys.argv[3].encode(),
                  headers={'Content-Type': 'application/json'})
        r = c.getresponse()
        n = len(r.read1(1024)) if r.status == 200 else -r.status
        c.sock.shutdown(socket.SHUT_RDWR)
        c.close()
        print('read', n)
        return 0 if n > 0 else 1
    if mode == 'batch':
        c = http.client.HTTPConnection('127.0.0.1', port, timeout=120)
        c.request('POST', '/v1/audio/speech/batch', body=sys.argv[3].encode(),
                  headers={'Content-Type': 'application/json'})
        r = c.getresponse()
        reply = json.loads(r.read())
        c.close()
        results = [{'index': x['index'], 'status': x['status'],
                    'bytes': len(base64.b64decode(x['audio_data'])) if x['status'] == 'success' else 0,
                    'media_type': x.get('media_type'), 'usage': x.get('usage'), 'error': x.get('error')}
                   for x in reply.get('results', [])]
        print(json.dumps({'status': r.status, 'id': reply.get('id'), 'total': reply.get('total'),
                          'succeeded': reply.get('succeeded'), 'failed': reply.get('failed'),
                          'results': results}))
        return 0 if r.status == 200 else 1
    print('unknown mode', mode, file=sys.stderr)
    return 2


if __name__ == '__main__':
    sys.exit(main())
