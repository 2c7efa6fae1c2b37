#!/usr/bin/env python3
"""client.py - Python standard-library clients for tests/unit/test_server.c.

usage: client.py PORT upload FILE [field=value ...]   multipart POST /v1/audio/voices (http.client)
       client.py PORT truncated FILE                  the same body cut before its closing boundary
       client.py PORT slow                            sends half a request line, then waits for the
                                                      server to drop the connection
       client.py PORT slowbody                        sends a speech request's headers and a tenth of
                                                      its body, then waits for the server to drop it
       client.py PORT disconnect JSON                 POST /v1/audio/speech, read the first bytes of
                                                      the streamed body, then close the socket
Prints "STATUS BODY" (upload, truncated), "closed" (slow, slowbody) or "read N" (disconnect); exit
0, or 1 when the server did not behave (slow, slowbody: still open after 30 s).
"""
import http.client
import json
import os
import socket
import sys
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
        try:
            return 0 if s.recv(4096) == b'' and print('closed') is None else 1
        except socket.timeout:
            return 1
        finally:
            s.close()
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
    print('unknown mode', mode, file=sys.stderr)
    return 2


if __name__ == '__main__':
    sys.exit(main())
