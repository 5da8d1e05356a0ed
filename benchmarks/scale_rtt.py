# The round trip between two namespace nodes of the local cluster, in microseconds (median of 200
# one-byte TCP ping-pongs): what `cluster.sh delay` really gives, recorded beside every figure.
# Usage: scale_rtt.py NODE_A NODE_B (namespace names; run as root).
import socket
import subprocess
import sys

if len(sys.argv) == 4 and sys.argv[1] == "--serve":
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", int(sys.argv[3])))
    s.listen()
    s.settimeout(10)
    c, _ = s.accept()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while (d := c.recv(64)):
        c.sendall(d)
    sys.exit(0)
if len(sys.argv) != 3:
    sys.exit("usage: scale_rtt.py NODE_A NODE_B")
a, b = sys.argv[1:]
port = 29411
server = subprocess.Popen(["nsenter", f"--net=/run/netns/{b}", sys.executable, __file__, "--serve", b, str(port)])
probe = f"""
import socket, statistics, time
for _ in range(100):
    try:
        c = socket.create_connection(({b!r}, {port}), timeout=2); break
    except OSError: time.sleep(0.05)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
t = []
for _ in range(200):
    x = time.perf_counter(); c.sendall(b"x"); c.recv(64); t.append((time.perf_counter() - x) * 1e6)
print(f"{{statistics.median(t):.0f}}")
"""
out = subprocess.run(["nsenter", f"--net=/run/netns/{a}", sys.executable, "-c", probe], capture_output=True, text=True, timeout=20)
server.wait(timeout=10)
if out.returncode != 0:
    sys.exit(out.stderr.strip())
print(out.stdout.strip())
