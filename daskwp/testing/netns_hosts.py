"""A small cluster of *hosts* on one machine: Linux network namespaces on a private bridge.

Used by ``tests/test_hosts.py`` (the ``hosts`` and ``cluster`` fixtures below) and by
``benchmarks/hosts_bench.py``. Needs root and iproute2 (``ip``); ``skip_reason()`` says why
not where it cannot work.

Topology (every name starts with ``dwph<pid of the owner>-``; nothing is created in the root
namespace, which keeps its links and routes as they are)::

        client 10.231.42.10    sched 10.231.42.1    w1 10.231.42.11    w2 10.231.42.12
           eth0                   eth0                 eth0               eth0
            |                      |                    |                  |
          p-client              p-sched               p-w1               p-w2
    +------------------------ br0 in the "switch" namespace  (sw) -------------------------+

* one namespace per host, each with ``lo`` and ``eth0``, one end of a veth pair whose other
  end (``p-<host>``) is a port of bridge ``br0`` in a dedicated switch namespace. The hosts'
  only route is the connected /24 on ``eth0``: traffic between them can only cross ``br0``,
  and there is no route anywhere else. IPv6 is turned off in every namespace (no link-local
  chatter on the bridge).
* ``Hosts.create`` checks, before anything is started, that ``ip route get <addr>`` from
  every host (the client's first) reaches every other test address directly on its ``eth0``,
  that each ``eth0`` is paired with the switch namespace and that every port is on ``br0``;
  it raises ``TopologyError`` otherwise.
* processes run in a host with ``ip netns exec <ns> <the venv's python> ...``: the
  namespaces share the filesystem, so every host sees the same venv, repository, input and
  output (the "shared filesystem" a multi-machine cluster needs).
* faults: ``kill_host`` (SIGKILL every process in the namespace: ``ip netns pids``),
  ``link_down`` / ``link_up`` (the host's switch port: a pulled cable; the host itself sees
  only NO-CARRIER), ``slow_link`` (``tc netem delay`` on the host's ``eth0``; where the kernel
  has no netem qdisc, a user-space delay line on its switch port, see ``delay_line``).
* ``teardown`` (a finalizer) kills every process in the namespaces and deletes them (the
  veth pairs and the bridge go with them); ``create`` first removes leftovers of a crashed
  earlier run: namespaces with the prefix whose owner process is gone. Every process started
  here also gets SIGKILL when the process that started it dies (``PR_SET_PDEATHSIG``), so a
  killed test run leaves no cluster running.

The client (``daskwp run``, the accessor's script) is a host of its own rather than the root
namespace: the root namespace gets no address or route on the bridge, so nothing outside the
namespaces can reach the test network or be reached from it, and the client's traffic to the
scheduler crosses the bridge like every other host's.

Dask workers run with ``--no-nanny``: a host's worker is then exactly one process, so
killing a host kills its worker for good and nothing restarts it behind the test's back (a
nanny restarts a killed worker in place: a different fault). The fixture restarts what a
test killed.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]   # the repository (daskwp/testing/ is two down)
PREFIX = "dwph"                        # every namespace this module makes: dwph<pid>-<role>
SUBNET = "10.231.42"                   # the private /24 on the bridge
SCHEDULER_PORT = 8786
WORKER_PORT = 8790
BRIDGE = "br0"
DEV = "eth0"
#: Dask settings of every cluster process (scheduler, workers, clients). The TCP timeout is
#: how long an unanswered connection lives (kernel keepalive + TCP_USER_TIMEOUT); dask's
#: default is 30 s, 12 s is the lowest its keepalive arithmetic allows and keeps a cut-link
#: test short. Everything else is dask's default.
DASK_ENV = {"DASK_DISTRIBUTED__COMM__TIMEOUTS__TCP": "12s"}


class TopologyError(RuntimeError):
    """The namespaces are not wired as they must be (a route that does not stay on the
    bridge, a port off it): nothing is started."""


@dataclasses.dataclass
class Host:
    role: str          # "client", "sched", "w1", ...
    ns: str            # namespace name
    addr: str          # its address on the bridge
    port: str          # its veth's other end, a port of br0 in the switch namespace

    def __str__(self):
        return f"{self.role} ({self.addr}, netns {self.ns})"


def _ip(*args, check=True, timeout=30) -> subprocess.CompletedProcess:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: exit {proc.returncode}: "
                           f"{proc.stderr.strip()}")
    return proc


def _die_with_parent() -> None:
    """preexec_fn: the child gets SIGKILL when the process that started it dies (a killed
    test run leaves no cluster running; its namespaces go at the next run's ``create``)."""
    import ctypes
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (killed, not yet reaped) is gone too
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def list_namespaces() -> list[str]:
    proc = _ip("netns", "list", check=False)
    return [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]


def namespace_pids(ns: str) -> list[int]:
    proc = _ip("netns", "pids", ns, check=False)
    return [int(x) for x in proc.stdout.split() if x.isdigit()]


def kill_namespace(ns: str, timeout: float = 15) -> list[int]:
    """SIGKILL every process in ``ns`` (by pid, as ``ip netns pids`` lists them) and wait
    until none is left. Returns the pids killed."""
    killed = []
    deadline = time.monotonic() + timeout
    while True:
        pids = namespace_pids(ns)
        if not pids:
            return killed
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {pids} in netns {ns} survive SIGKILL")
        time.sleep(0.05)


def delete_namespace(ns: str) -> None:
    kill_namespace(ns)
    _ip("netns", "del", ns, check=False)


def remove_stale(prefix: str = PREFIX, owner: int | None = None) -> list[str]:
    """Delete namespaces named ``<prefix><pid>-*`` whose owner process ``pid`` is gone (or
    is ``owner``: this process's own leftovers). Another live run's namespaces are kept."""
    removed = []
    pat = re.compile(rf"^{re.escape(prefix)}(\d+)-")
    for ns in list_namespaces():
        m = pat.match(ns)
        if not m:
            continue
        pid = int(m.group(1))
        if pid == owner or not _alive(pid):
            delete_namespace(ns)
            removed.append(ns)
    return removed


_SKIP: dict = {}


def skip_reason() -> str | None:
    """None where namespaces, veth pairs and a bridge can be made here, else why not."""
    if "reason" in _SKIP:
        return _SKIP["reason"]
    reason = None
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        reason = "network namespaces need root (run the tests as root)"
    elif shutil.which("ip") is None:
        reason = "iproute2 ('ip') is not installed (apt-get install iproute2)"
    else:
        probe, other = f"{PREFIX}{os.getpid()}-probe", f"{PREFIX}{os.getpid()}-probe2"
        try:
            for ns in (probe, other):
                p = _ip("netns", "add", ns, check=False)
                if p.returncode != 0:
                    reason = f"'ip netns add' fails here: {p.stderr.strip()}"
                    break
            else:
                p = _ip("link", "add", "name", DEV, "netns", probe, "type", "veth", "peer",
                        "name", "p0", "netns", other, check=False)
                if p.returncode != 0:
                    reason = f"cannot make a veth pair: {p.stderr.strip()}"
                else:
                    p = _ip("-n", other, "link", "add", BRIDGE, "type", "bridge", check=False)
                    if p.returncode != 0:
                        reason = f"cannot make a bridge: {p.stderr.strip()}"
                if reason is None:
                    p = _ip("netns", "exec", probe, sys.executable, "-c", "pass", check=False)
                    if p.returncode != 0:
                        reason = f"'ip netns exec' fails here: {p.stderr.strip()}"
        finally:
            for ns in (probe, other):
                _ip("netns", "del", ns, check=False)
    _SKIP["reason"] = reason
    return reason


def netem_available() -> bool:
    """Whether ``tc qdisc ... netem`` works in this kernel (many VM kernels lack sch_netem)."""
    if "netem" in _SKIP:
        return _SKIP["netem"]
    ok = False
    if shutil.which("tc") is not None:
        ns = f"{PREFIX}{os.getpid()}-probe"
        if _ip("netns", "add", ns, check=False).returncode == 0:
            try:
                _ip("-n", ns, "link", "add", "d0", "type", "dummy", check=False)
                if _ip("-n", ns, "link", "show", "d0", check=False).returncode != 0:
                    _ip("-n", ns, "link", "add", "d0", "type", "veth", "peer", "name", "d1",
                        check=False)
                p = subprocess.run(["tc", "-n", ns, "qdisc", "add", "dev", "d0", "root",
                                    "netem", "delay", "1ms"], capture_output=True, text=True)
                ok = p.returncode == 0
            finally:
                _ip("netns", "del", ns, check=False)
    _SKIP["netem"] = ok
    return ok


def slow_link_reason() -> str | None:
    """None where :meth:`Hosts.slow_link` can work (netem, or packet sockets for the delay
    line), else why not."""
    if netem_available():
        return None
    import socket
    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0).close()
    except (OSError, AttributeError) as e:
        return f"no netem qdisc in this kernel and no packet sockets for a delay line ({e})"
    return None


class Hosts:
    """The hosts of one test session (see the module docstring)."""

    def __init__(self, workdir, workers: int = 2, owner: int | None = None):
        self.owner = os.getpid() if owner is None else owner
        self.base = f"{PREFIX}{self.owner}-"
        self.switch = self.base + "sw"
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        roles = [("client", 10), ("sched", 1)] + [(f"w{i}", 10 + i)
                                                 for i in range(1, workers + 1)]
        self.hosts = {r: Host(r, self.base + r, f"{SUBNET}.{n}", f"p-{r}") for r, n in roles}
        self.procs: dict[str, list[subprocess.Popen]] = {r: [] for r in self.hosts}
        self.slow: dict[str, str] = {}      # role -> "netem" | "delay-line"
        self.created = False
        self._logs = 0

    # -- hosts ------------------------------------------------------------------------
    @property
    def client(self) -> Host:
        return self.hosts["client"]

    @property
    def sched(self) -> Host:
        return self.hosts["sched"]

    @property
    def workers(self) -> list[Host]:
        return [h for r, h in self.hosts.items() if r.startswith("w")]

    @property
    def scheduler_address(self) -> str:
        return f"tcp://{self.sched.addr}:{SCHEDULER_PORT}"

    def worker_address(self, host: Host) -> str:
        return f"tcp://{host.addr}:{WORKER_PORT}"

    # -- topology ---------------------------------------------------------------------
    def create(self) -> None:
        """Remove stale leftovers, make the switch and the hosts, check every route."""
        remove_stale(owner=self.owner)
        self.created = True
        sw = self.switch
        self._add_namespace(sw)
        _ip("-n", sw, "link", "add", BRIDGE, "type", "bridge")
        _ip("-n", sw, "link", "set", BRIDGE, "up")
        for h in self.hosts.values():
            self._add_namespace(h.ns)
            _ip("link", "add", "name", DEV, "netns", h.ns, "type", "veth", "peer", "name",
                h.port, "netns", sw)
            _ip("-n", h.ns, "addr", "add", f"{h.addr}/24", "dev", DEV)
            _ip("-n", h.ns, "link", "set", DEV, "up")
            _ip("-n", sw, "link", "set", h.port, "master", BRIDGE)
            _ip("-n", sw, "link", "set", h.port, "up")
        self.check_routes()

    def _add_namespace(self, ns: str) -> None:
        _ip("netns", "add", ns)
        _ip("-n", ns, "link", "set", "lo", "up")
        # No IPv6 (no link-local addresses, no neighbour discovery on the bridge).
        subprocess.run(["ip", "netns", "exec", ns, "sh", "-c",
                        "for k in all default; do "
                        "echo 1 > /proc/sys/net/ipv6/conf/$k/disable_ipv6; done"],
                       capture_output=True)

    def route(self, src: Host, addr: str) -> str:
        return _ip("-n", src.ns, "-o", "route", "get", addr).stdout.strip()

    def check_routes(self) -> list[str]:
        """Every test address is reached from every host (the client first) directly on its
        own ``eth0``, whose peer is a port of ``br0`` in the switch namespace. Raises
        TopologyError otherwise; returns the routes seen."""
        problems, seen = [], []
        order = [self.client] + [h for h in self.hosts.values() if h is not self.client]
        ports = _ip("-n", self.switch, "-o", "link", "show", "master", BRIDGE).stdout
        for src in order:
            link = _ip("-n", src.ns, "-o", "link", "show", DEV).stdout
            if f"link-netns {self.switch}" not in link:
                problems.append(f"{src}: {DEV} is not paired with the switch: {link.strip()}")
            if f" {src.port}@" not in f" {ports}".replace("\\", " "):
                problems.append(f"{src}: port {src.port} is not on {BRIDGE}")
            default = _ip("-n", src.ns, "route", "show", "default").stdout.strip()
            if default:
                problems.append(f"{src}: has a default route ({default})")
            for dst in order:
                if dst is src:
                    continue
                r = self.route(src, dst.addr)
                seen.append(f"{src.role}: {r}")
                dev = re.search(r"\bdev (\S+)", r)
                if dev is None or dev.group(1) != DEV or " via " in f" {r} " or \
                        not r.startswith(dst.addr):
                    problems.append(f"{src} -> {dst.addr}: route {r!r} is not direct on {DEV}")
        if problems:
            raise TopologyError("the test network is not isolated on its bridge; nothing "
                                "was started:\n  " + "\n  ".join(problems))
        return seen

    # -- processes --------------------------------------------------------------------
    def env(self, extra: dict | None = None) -> dict:
        env = dict(os.environ)
        env.update(DASK_ENV)
        env["PYTHONUNBUFFERED"] = "1"
        env.pop("DASK_SCHEDULER_ADDRESS", None)
        if extra:
            env.update(extra)
        return env

    def log_path(self, name: str) -> Path:
        self._logs += 1
        return self.workdir / f"{self._logs:04d}-{name}.log"

    def command(self, host: Host, argv) -> list:
        """``argv`` as run in ``host``: ``ip netns exec <its namespace> argv``."""
        return ["ip", "netns", "exec", host.ns, *map(str, argv)]

    def popen(self, host: Host, argv, name: str | None = None, env: dict | None = None,
              stdout=None) -> subprocess.Popen:
        """Start ``argv`` in ``host`` (its output in a log file of the work folder, or
        ``stdout``)."""
        log = self.log_path(name or host.role)
        fh = open(log, "wb")
        proc = subprocess.Popen(self.command(host, argv),
                                stdout=fh if stdout is None else stdout,
                                stderr=fh, cwd=REPO, env=self.env(env),
                                start_new_session=True, preexec_fn=_die_with_parent)
        fh.close()
        proc.log = log
        self.procs.setdefault(host.role, []).append(proc)
        return proc

    def run(self, host: Host, argv, timeout: float = 120, name: str | None = None,
            env: dict | None = None) -> subprocess.CompletedProcess:
        """Run ``argv`` in ``host`` to completion; stdout returned, stderr in the log."""
        proc = self.popen(host, argv, name, env, stdout=subprocess.PIPE)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            raise RuntimeError(f"{argv} in {host} ran past {timeout} s; log {proc.log}:\n"
                               f"{tail(proc.log)}")
        return subprocess.CompletedProcess(argv, proc.returncode, out.decode(),
                                           proc.log.read_text(errors="replace"))

    def python(self, host: Host, code: str, *args, timeout: float = 120):
        return self.run(host, [sys.executable, "-c", code, *args], timeout=timeout,
                        name=f"{host.role}-python")

    def start_scheduler(self, timeout: float = 60) -> subprocess.Popen:
        p = self.popen(self.sched, [sys.executable, "-m", "distributed.cli.dask_scheduler",
                                    "--host", self.sched.addr, "--port", SCHEDULER_PORT,
                                    "--no-dashboard"], name="scheduler")
        self._wait_log(p, "Scheduler at:", timeout)
        return p

    def start_worker(self, host: Host, timeout: float = 60) -> subprocess.Popen:
        local = self.workdir / f"{host.role}-space"
        local.mkdir(exist_ok=True)
        p = self.popen(host, [sys.executable, "-m", "distributed.cli.dask_worker",
                              self.scheduler_address, "--no-nanny", "--nthreads", "1",
                              "--host", host.addr, "--worker-port", WORKER_PORT,
                              "--no-dashboard", "--name", host.role,
                              "--local-directory", local], name=f"worker-{host.role}")
        self._wait_log(p, "Registered to:", timeout)
        return p

    def start_cluster(self) -> None:
        """A fresh scheduler and every worker (whatever ran before is killed first)."""
        for h in [self.sched] + self.workers:
            self.kill_host(h)
        self.start_scheduler()
        for w in self.workers:
            self.start_worker(w)

    def _wait_log(self, proc, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in proc.log.read_text(errors="replace"):
                return
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"{proc.args[3:]} did not print {text!r} "
                           f"(exit {proc.poll()}); log {proc.log}:\n{tail(proc.log)}")

    def pids(self, host: Host) -> list[int]:
        return namespace_pids(host.ns)

    def kill_host(self, host: Host) -> list[int]:
        """SIGKILL every process of ``host`` (the host dies); returns their pids."""
        killed = kill_namespace(host.ns) if self.created else []
        for p in self.procs[host.role]:
            if p.poll() is None:
                p.kill()
            p.wait()
        self.procs[host.role] = [p for p in self.procs[host.role] if p.poll() is None]
        return killed

    # -- links --------------------------------------------------------------------------
    def link_down(self, host: Host) -> None:
        """Cut ``host`` off: its switch port goes down (the host sees NO-CARRIER)."""
        _ip("-n", self.switch, "link", "set", host.port, "down")

    def link_up(self, host: Host) -> None:
        _ip("-n", self.switch, "link", "set", host.port, "up")

    def slow_link(self, host: Host, delay_ms: float = 50, mechanism: str = "auto") -> str:
        """Delay every packet ``host`` sends by ``delay_ms`` (each round trip through it
        gets that much longer): ``tc qdisc add dev eth0 root netem delay <d>ms`` in the
        host, or, where the kernel has no netem (``mechanism="auto"``) or when asked
        (``"delay-line"``), :func:`delay_line` on its switch port. Returns the mechanism."""
        if mechanism == "auto":
            mechanism = "netem" if netem_available() else "delay-line"
        if mechanism == "netem":
            subprocess.run(["tc", "-n", host.ns, "qdisc", "add", "dev", DEV, "root", "netem",
                            "delay", f"{delay_ms:g}ms"], check=True, capture_output=True)
        else:
            sw, d, q = self.switch, f"d-{host.role}", f"q-{host.role}"
            _ip("-n", sw, "link", "add", d, "type", "veth", "peer", "name", q)
            _ip("-n", sw, "link", "set", q, "master", BRIDGE)
            for dev in (d, q):
                _ip("-n", sw, "link", "set", dev, "up")
            _ip("-n", sw, "link", "set", host.port, "nomaster")
            p = self.popen(Host("switch", sw, "", ""), [
                sys.executable, __file__, "delay-line", host.port, d,
                "--delay-ms", delay_ms], name=f"delay-line-{host.role}")
            self._wait_log(p, "delay line ready", 30)
        self.slow[host.role] = mechanism
        return mechanism

    def clear_slow_link(self, host: Host) -> None:
        mechanism = self.slow.pop(host.role, None)
        if mechanism == "netem":
            subprocess.run(["tc", "-n", host.ns, "qdisc", "del", "dev", DEV, "root"],
                           capture_output=True)
        elif mechanism == "delay-line":
            for p in self.procs.get("switch", []):
                if p.poll() is None and f"delay-line-{host.role}" in p.log.name:
                    p.kill()
                    p.wait()
            _ip("-n", self.switch, "link", "del", f"d-{host.role}", check=False)
            _ip("-n", self.switch, "link", "set", host.port, "master", BRIDGE)

    def restore(self) -> None:
        """Every link up and at full speed again."""
        if not self.created:
            return
        for h in list(self.hosts.values()):
            self.clear_slow_link(h)
            self.link_up(h)

    def connect_seconds(self, src: Host, addr: str, port: int, n: int = 5) -> float:
        """Median time of a TCP connect from ``src`` to ``addr:port``: one round trip."""
        code = ("import socket, statistics, sys, time\n"
                "a, p, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])\n"
                "ts = []\n"
                "for _ in range(n):\n"
                "    t = time.perf_counter()\n"
                "    socket.create_connection((a, p), timeout=10).close()\n"
                "    ts.append(time.perf_counter() - t)\n"
                "print(statistics.median(ts))\n")
        out = self.python(src, code, addr, port, n, timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"connect {addr}:{port} from {src}: {out.stderr}")
        return float(out.stdout.strip())

    # -- teardown -----------------------------------------------------------------------
    def teardown(self) -> None:
        """Kill every process of every host and delete every namespace (idempotent; run
        from finalizers, so it must not raise)."""
        errors = []
        names = [h.ns for h in self.hosts.values()] + [self.switch]
        for ns in names:
            try:
                delete_namespace(ns)
            except Exception as e:  # noqa: BLE001 - keep tearing down
                errors.append(f"{ns}: {e}")
        for procs in self.procs.values():
            for p in procs:
                if p.poll() is None:
                    p.kill()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    errors.append(f"{p.args} did not exit")
        self.created = False
        left = [ns for ns in list_namespaces() if ns.startswith(self.base)]
        if left or errors:
            print(f"netns_hosts teardown: left {left}, errors {errors}", file=sys.stderr)


def tail(path, lines: int = 30) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError as e:
        return f"({e})"


# ------------------------------------------------------------------------------------------
# A user-space delay line, for kernels without sch_netem
# ------------------------------------------------------------------------------------------
def delay_line(a: str, b: str, delay_a_to_b: float, delay_b_to_a: float = 0.0) -> None:
    """Forward every Ethernet frame between interfaces ``a`` and ``b`` (both in this
    namespace), frames from ``a`` ``delay_a_to_b`` seconds late, frames from ``b``
    ``delay_b_to_a`` late, in order: a wire with latency. AF_PACKET sockets with virtio-net
    headers (``PACKET_VNET_HDR``), so the veths' large GSO frames and partial checksums
    pass through unchanged. Runs until killed."""
    import collections
    import selectors
    import socket

    SOL_PACKET, PACKET_VNET_HDR, PACKET_OUTGOING, ETH_P_ALL = 263, 15, 4, 0x0003
    socks = {}
    for name in (a, b):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        s.bind((name, 0))
        s.setblocking(False)
        socks[name] = s
    route = {a: (socks[b], delay_a_to_b), b: (socks[a], delay_b_to_a)}
    pending = {a: collections.deque(), b: collections.deque()}
    sel = selectors.DefaultSelector()
    for name, s in socks.items():
        sel.register(s, selectors.EVENT_READ, name)
    print("delay line ready", flush=True)
    while True:
        now = time.monotonic()
        for name, q in pending.items():
            out = route[name][0]
            while q and q[0][0] <= now:
                try:
                    out.send(q.popleft()[1])
                except OSError:
                    pass  # a lost frame, as on a wire
        dues = [q[0][0] for q in pending.values() if q]
        timeout = max(0.0, min(dues) - time.monotonic()) if dues else None
        for key, _ in sel.select(timeout):
            name = key.data
            s = socks[name]
            out, delay = route[name]
            while True:
                try:
                    frame, addr = s.recvfrom(1 << 18)
                except BlockingIOError:
                    break
                if addr[2] == PACKET_OUTGOING:
                    continue  # what this line itself sent
                due = time.monotonic() + delay
                if delay <= 0 and not pending[name]:
                    try:
                        out.send(frame)
                    except OSError:
                        pass
                else:
                    pending[name].append((due, frame))


# ------------------------------------------------------------------------------------------
# pytest fixtures
# ------------------------------------------------------------------------------------------
try:
    import pytest
except ImportError:  # the benchmark runs without pytest
    pytest = None

if pytest is not None:
    @pytest.fixture(scope="module")
    def hosts(request, tmp_path_factory):
        """The hosts (namespaces, bridge, checked routes), torn down after the module even
        when a test fails. Skips, with the reason, where namespaces cannot be made."""
        reason = skip_reason()
        if reason:
            pytest.skip(reason)
        net = Hosts(tmp_path_factory.mktemp("hosts"))
        request.addfinalizer(net.teardown)
        net.create()
        return net

    @pytest.fixture
    def cluster(hosts, request):
        """``hosts`` with a fresh scheduler and one worker on every worker host, every link
        up and unshaped; after the test, links are restored and the job's processes
        killed (the cluster itself is restarted by the next test)."""
        request.addfinalizer(hosts.restore)
        request.addfinalizer(lambda: hosts.kill_host(hosts.client))
        hosts.restore()
        hosts.start_cluster()
        return hosts


def _main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("delay-line", help="forward frames between two interfaces, late")
    d.add_argument("a")
    d.add_argument("b")
    d.add_argument("--delay-ms", type=float, default=50.0, help="frames from A to B")
    d.add_argument("--back-ms", type=float, default=0.0, help="frames from B to A")
    sub.add_parser("cleanup", help=f"delete leftover {PREFIX}<pid>-* namespaces of dead runs")
    args = ap.parse_args(argv)
    if args.cmd == "delay-line":
        delay_line(args.a, args.b, args.delay_ms / 1e3, args.back_ms / 1e3)
    else:
        print("removed:", " ".join(remove_stale()) or "nothing")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
