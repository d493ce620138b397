#!/bin/sh
# Start the virtual display, a window manager, a VNC server on it, and noVNC on :6080.
# Each runs in the background; the script returns once noVNC answers.
set -eu
Xvfb "${DISPLAY:-:99}" -screen 0 1280x800x24 -nolisten tcp >/tmp/xvfb.log 2>&1 &
for _ in $(seq 50); do [ -e "/tmp/.X11-unix/X${DISPLAY#:}" ] && break; sleep 0.1; done
fluxbox >/tmp/fluxbox.log 2>&1 &
x11vnc -display "${DISPLAY:-:99}" -forever -shared -nopw -localhost -rfbport 5900 \
    >/tmp/x11vnc.log 2>&1 &
websockify --web /usr/share/novnc 6080 localhost:5900 >/tmp/novnc.log 2>&1 &
for _ in $(seq 100); do
    python3 -c 'import socket; socket.create_connection(("127.0.0.1", 6080), 1)' \
        2>/dev/null && exit 0
    sleep 0.1
done
echo "noVNC did not start: see /tmp/novnc.log" >&2
exit 1
