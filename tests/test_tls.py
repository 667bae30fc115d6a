"""daskwp on a TLS-only Dask cluster (issue 43, docs/batch-jobs.md "TLS").

A CA, a certificate for the cluster's processes and one for the client are made here (the
``cryptography`` package), and so is a second CA with a certificate of its own (the "other
CA"). A scheduler and two workers start on the multi-host test network of
``daskwp/testing/netns_hosts.py`` (each a network namespace on a private bridge) with
``--tls-ca-file/--tls-cert/--tls-key`` and ``distributed.comm.require-encryption``: they
listen on ``tls://`` only. Where namespaces cannot be made (not root, no iproute2), or with
``DASKWP_TLS_LOOPBACK=1``, the same processes run on loopback. One cluster serves the module.

* ``daskwp run`` of a job like ``conf/existing-scheduler.yaml`` with the client's certificate
  (by ``--tls-*`` flags, by ``security:`` in the job file, by dask's own configuration in
  environment variables) completes and equals the single-machine tokenizer; ``_job.json``
  records that TLS was used, never the key.
* with no certificate, a certificate of the other CA (the scheduler's is then not trusted),
  a client certificate of the other CA (the client's is not trusted), or the ``tcp://``
  address: the job exits non-zero within 30 s with one error line naming the cause, and
  leaves no part and no temporary file.
* the accessor through ``daskwp.connect(security=...)`` gives the same tokens.
* a worker with a certificate of the other CA never joins (the scheduler refuses its
  handshakes), so no task runs there.
"""

from __future__ import annotations

import datetime
import json
import os
import pickle
import socket
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import daskwp
from daskwp.distributed.cluster import ClusterSecurityError, make_security, security_record

from daskwp.testing.netns_hosts import WORKER_PORT, Hosts, skip_reason
from test_hosts import Reference, choose_corpus, part_files, read_job_output

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "conf" / "existing-scheduler.yaml"
BUDGET = 300_000            # input bytes: a small corpus, a few partitions
PARTS = 6
JOB_TIMEOUT = 180
REFUSE_SECONDS = 30         # a refused job ends within this
#: Every cluster process refuses unencrypted connections.
REQUIRE = {"DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True"}


# -- certificates ----------------------------------------------------------------------------

def _pem_cert(cert) -> bytes:
    from cryptography.hazmat.primitives import serialization
    return cert.public_bytes(serialization.Encoding.PEM)


def _certificate(subject: str, key, issuer=None, issuer_key=None):
    """An X.509 certificate for ``key``: a CA's own (``issuer`` None) or one signed by the
    CA ``issuer`` for servers and clients alike (dask's processes are both)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = datetime.datetime.now(datetime.timezone.utc)
    ca = issuer is None
    b = (x509.CertificateBuilder().subject_name(name)
         .issuer_name(name if ca else issuer.subject).public_key(key.public_key())
         .serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(hours=1))
         .not_valid_after(now + datetime.timedelta(days=2))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
         .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=ca, crl_sign=ca,
                                      content_commitment=False, key_encipherment=not ca,
                                      data_encipherment=False, key_agreement=False,
                                      encipher_only=False, decipher_only=False), critical=True)
         .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                        critical=False))
    if not ca:
        b = (b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                    ExtendedKeyUsageOID.CLIENT_AUTH]),
                             critical=False)
             .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                 issuer_key.public_key()), critical=False))
    return b.sign(issuer_key or key, hashes.SHA256())


def make_certificates(folder: Path) -> dict:
    """Two CAs ("cluster", "other") and their certificates: ``{name: path}`` for
    ``ca.pem``, ``node.pem``/``node.key`` (scheduler and workers), ``client.pem``/
    ``client.key`` (daskwp), ``other-ca.pem``, ``other.pem``/``other.key``."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    folder.mkdir(parents=True, exist_ok=True)
    paths = {}

    def write(name: str, data: bytes, secret: bool = False) -> None:
        p = folder / name
        p.write_bytes(data)
        if secret:
            p.chmod(0o600)
        paths[name] = str(p)

    for ca_name, leaves in (("ca", ("node", "client")), ("other-ca", ("other",))):
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca = _certificate(f"daskwp test {ca_name}", ca_key)
        write(f"{ca_name}.pem", _pem_cert(ca))
        for leaf in leaves:
            key = ec.generate_private_key(ec.SECP256R1())
            write(f"{leaf}.pem", _pem_cert(_certificate(f"daskwp-{leaf}", key, ca, ca_key)))
            write(f"{leaf}.key", key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption()), secret=True)
    return paths


# -- the cluster -----------------------------------------------------------------------------

class LoopbackHosts(Hosts):
    """The hosts of ``netns_hosts`` where namespaces cannot be made: every host is this
    machine's loopback, each process a plain child process (killed at teardown)."""

    def create(self) -> None:
        for h in self.hosts.values():
            h.addr = "127.0.0.1"

    def command(self, host, argv) -> list:
        return [str(a) for a in argv]

    def teardown(self) -> None:
        for h in self.hosts.values():
            self.kill_host(h)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TLSCluster:
    """A scheduler and two workers (w1, w2) with mutual TLS on ``net``'s hosts."""

    def __init__(self, net: Hosts, certs: dict, loopback: bool):
        self.net, self.certs, self.loopback = net, certs, loopback
        self.port = _free_port() if loopback else 8786
        self.host_port = f"{net.sched.addr}:{self.port}"
        self.address = f"tls://{self.host_port}"

    def tls_args(self, cert: str = "node", ca: str = "ca.pem") -> list:
        c = self.certs
        return ["--tls-ca-file", c[ca], "--tls-cert", c[f"{cert}.pem"],
                "--tls-key", c[f"{cert}.key"]]

    def start(self) -> None:
        net = self.net
        p = net.popen(net.sched, [sys.executable, "-m", "distributed.cli.dask_scheduler",
                                  "--host", net.sched.addr, "--port", self.port,
                                  "--protocol", "tls", "--no-dashboard", *self.tls_args()],
                      name="scheduler", env=REQUIRE)
        net._wait_log(p, "Scheduler at:", 60)
        self.scheduler = p
        for role in ("w1", "w2"):
            net._wait_log(self.start_worker(role), "Registered to:", 60)

    def start_worker(self, role: str, cert: str = "node", *extra):
        net, host = self.net, self.net.hosts[role]
        local = net.workdir / f"{role}-space"
        local.mkdir(exist_ok=True)
        port = [] if self.loopback else ["--worker-port", WORKER_PORT]
        return net.popen(host, [sys.executable, "-m", "distributed.cli.dask_worker",
                                self.address, "--no-nanny", "--nthreads", "1",
                                "--host", host.addr, *port, "--no-dashboard", "--name", role,
                                "--local-directory", local, *self.tls_args(cert), *extra],
                         name=f"worker-{role}", env=REQUIRE)

    def scheduler_log(self) -> str:
        return self.scheduler.log.read_text(errors="replace")

    def python(self, code: str, *args, timeout: float = JOB_TIMEOUT):
        return self.net.python(self.net.client, code, *args, timeout=timeout)


@pytest.fixture(scope="module")
def tls(request, tmp_path_factory) -> TLSCluster:
    work = tmp_path_factory.mktemp("tls")
    certs = make_certificates(work / "certs")
    loopback = os.environ.get("DASKWP_TLS_LOOPBACK") == "1" or skip_reason() is not None
    net = (LoopbackHosts if loopback else Hosts)(work, workers=3)
    request.addfinalizer(net.teardown)
    net.create()
    cluster = TLSCluster(net, certs, loopback)
    cluster.start()
    return cluster


@pytest.fixture(scope="module")
def ref() -> Reference:
    r = Reference(choose_corpus(BUDGET))
    r.partition_size = max(1024, r.bytes // PARTS)
    return r


# -- jobs --------------------------------------------------------------------------------------

def run_job(tls: TLSCluster, ref: Reference, out: Path, *args, job=CONF, address=None,
            env=None):
    """``daskwp run JOB`` in the client host with ``--json``; returns (process, seconds)."""
    argv = [sys.executable, "-m", "daskwp", "run", job,
            "--set", f"scheduler_address={address or tls.address}",
            "--set", f"input={json.dumps([str(f) for f in ref.files])}",
            "--set", f"output={out}", "--set", f"partition_size={ref.partition_size}",
            "--set", "device=cpu", "--json", *args]
    t0 = time.monotonic()
    proc = tls.net.run(tls.net.client, argv, timeout=JOB_TIMEOUT, name="job", env=env)
    return proc, time.monotonic() - t0


def leftovers(out: Path) -> list:
    """Temporary files in ``out`` (hidden names, ``*.tmp``)."""
    return sorted(p.name for p in out.iterdir()
                  if p.name.startswith(".") or p.name.endswith(".tmp")) if out.exists() else []


def key_material(certs: dict) -> list:
    """What must never be recorded: the key files' paths and every line of their PEM
    bodies."""
    out = []
    for name in ("client.key", "node.key", "other.key"):
        out.append(certs[name])
        out += [ln for ln in Path(certs[name]).read_text().splitlines()
                if ln and not ln.startswith("-----")]
    return out


def check_complete(proc, ref: Reference, out: Path, what: str) -> dict:
    assert proc.returncode == 0, f"{what}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    s = json.loads(proc.stdout)
    assert len(part_files(out)) == s["partitions"] >= 2
    assert not leftovers(out)
    ref.assert_equal(read_job_output(out), what)
    return s


# -- tests ---------------------------------------------------------------------------------------

def _yaml_job(tls: TLSCluster, folder: Path) -> Path:
    """conf/existing-scheduler.yaml with a ``security:`` block whose paths are relative to
    the job file's folder."""
    c = tls.certs
    rel = {k: os.path.relpath(c[k], folder) for k in ("ca.pem", "client.pem", "client.key")}
    job = folder / "tls-job.yaml"
    job.write_text(CONF.read_text() + "security:\n"
                   f"  ca_file: {rel['ca.pem']}\n  cert: {rel['client.pem']}\n"
                   f"  key: {rel['client.key']}\n  require_encryption: true\n")
    return job


@pytest.mark.slow  # about 5 s a job, 12 s the first one on the fresh cluster
@pytest.mark.parametrize("how", ["flags", "yaml", "dask-config"])
def test_job_over_tls_equals_single_machine(tls, ref, tmp_path, how):
    """The job with the client's certificate completes on the TLS cluster, equal to the
    single-machine tokenizer; _job.json and _summary.json record TLS and where its settings
    came from, and no key (path or contents) appears in them or in what the job printed."""
    out = tmp_path / "out"
    c = tls.certs
    if how == "flags":
        proc, seconds = run_job(tls, ref, out, *tls.tls_args("client"))
    elif how == "yaml":
        proc, seconds = run_job(tls, ref, out, job=_yaml_job(tls, tmp_path))
    else:  # no flag: distributed's own configuration, from environment variables
        env = {"DASK_DISTRIBUTED__COMM__TLS__CA_FILE": c["ca.pem"],
               "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT": c["client.pem"],
               "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY": c["client.key"], **REQUIRE}
        proc, seconds = run_job(tls, ref, out, env=env)
    s = check_complete(proc, ref, out, f"job over TLS ({how})")
    recorded = json.loads((out / "_job.json").read_text())["security"]
    assert recorded == {"tls": True, "require_encryption": True, "ca_file": c["ca.pem"],
                        "cert": c["client.pem"],
                        "settings": "dask.config" if how == "dask-config" else "job"}
    assert s["security"] == recorded
    texts = {"_job.json": (out / "_job.json").read_text(),
             "_summary.json": (out / "_summary.json").read_text(),
             "stdout": proc.stdout, "stderr": proc.stderr}
    for secret in key_material(c):
        for where, text in texts.items():
            assert secret not in text, f"key material in {where}: {secret[:20]}..."
    print(f"\nMEASURED tls job ({how}): {seconds:.2f} s, {s['partitions']} partitions, "
          f"{'loopback' if tls.loopback else 'netns hosts'}")


#: (case, the client's arguments, the cause its one error line names)
REFUSALS = [
    ("no-certificate", [], "TLS required"),
    ("other-ca", ["other", "other-ca.pem"], "certificate not trusted"),
    ("client-cert-of-other-ca", ["other", "ca.pem"], "certificate not trusted"),
    ("tcp-address", "tcp", "TLS required"),
    ("tcp-address-with-certificate", "tcp+client", "TLS required"),
]


@pytest.mark.parametrize("case,client,cause", [
    pytest.param(*r, id=r[0],
                 marks=() if r[0] in ("no-certificate", "other-ca") else pytest.mark.slow)
    for r in REFUSALS])
def test_job_refused_without_the_right_certificate(tls, ref, tmp_path, case, client, cause):
    """Exit non-zero within 30 s with one error line naming the cause; no part, no summary,
    no temporary file."""
    out = tmp_path / "out"
    address = None
    if client in ("tcp", "tcp+client"):
        address = f"tcp://{tls.host_port}"
        args = tls.tls_args("client") if client == "tcp+client" else []
    else:
        args = tls.tls_args(*client) if client else []
    proc, seconds = run_job(tls, ref, out, *args, address=address)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 1, (proc.returncode, lines)
    assert seconds < REFUSE_SECONDS, seconds
    assert len(lines) == 1 and lines[0].startswith("daskwp: error: "), lines
    assert cause in lines[0], lines[0]
    assert not part_files(out) and not (out / "_summary.json").exists()
    assert not leftovers(out), leftovers(out)
    print(f"\nMEASURED refused ({case}) after {seconds:.2f} s: {lines[0]}")


ACCESSOR_SCRIPT = """
import json, sys
import dask.dataframe as dd
import daskwp

address, inp, out, ca, cert, key = sys.argv[1:7]
with daskwp.connect(scheduler_address=address,
                    security={"ca_file": ca, "cert": cert, "key": key}) as client:
    ddf = dd.read_parquet(inp)
    ddf["text"].wordpiece.tokenize(max_length=128, stride=32).to_parquet(out)
    print(json.dumps(sorted(w["name"] for w in client.scheduler_info()["workers"].values())))
"""


@pytest.mark.slow
def test_accessor_through_connect_security(tls, ref, tmp_path):
    """``daskwp.connect(scheduler_address=tls://..., security={...})`` in the client host,
    then the accessor's to_parquet: the same tokens as the single-machine tokenizer."""
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": ref.docs}), src,
                   row_group_size=max(1, len(ref.docs) // PARTS))
    out = tmp_path / "accessor"
    c = tls.certs
    r = tls.python(ACCESSOR_SCRIPT, tls.address, src, out, c["ca.pem"], c["client.pem"],
                   c["client.key"])
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == ["w1", "w2"]
    table = daskwp.read_tokenized(out).to_table()
    ref.assert_equal(table.sort_by([("logID", "ascending"), ("window", "ascending")]),
                     "accessor through connect(security=...)")


WORKERS_SCRIPT = """
import json, sys
import daskwp

address, ca, cert, key = sys.argv[1:5]
with daskwp.connect(scheduler_address=address,
                    security={"ca_file": ca, "cert": cert, "key": key}) as client:
    futures = client.map(lambda i: i * i, range(200), pure=False)
    assert client.gather(futures) == [i * i for i in range(200)]
    ran = client.run(lambda dask_worker: dask_worker.state.executed_count)
    names = {a: w["name"] for a, w in client.scheduler_info()["workers"].items()}
    print(json.dumps({names[a]: n for a, n in ran.items()}))
"""


@pytest.mark.slow
def test_untrusted_worker_never_joins(tls):
    """A worker whose certificate comes from the other CA (it trusts the cluster's CA) tries
    to join while tasks run: the scheduler refuses every handshake from it, it never
    registers, and every task runs on w1 and w2."""
    w3 = tls.net.hosts["w3"]
    failures_before = tls.scheduler_log().count("TLS handshake failed")
    proc = tls.start_worker("w3", "other", "--death-timeout", "60")
    try:
        deadline = time.monotonic() + 30
        while tls.scheduler_log().count("TLS handshake failed") < failures_before + 3:
            assert time.monotonic() < deadline, "the scheduler saw no handshake from w3"
            time.sleep(0.1)
        c = tls.certs
        r = tls.python(WORKERS_SCRIPT, tls.address, c["ca.pem"], c["client.pem"],
                       c["client.key"])
        assert r.returncode == 0, r.stderr[-3000:]
        ran = json.loads(r.stdout.strip().splitlines()[-1])
        assert sorted(ran) == ["w1", "w2"] and all(n > 0 for n in ran.values()), ran
        assert proc.poll() is None, "the untrusted worker gave up before the check"
    finally:
        tls.net.kill_host(w3)
    log = tls.scheduler_log()
    assert "name: w3" not in log and "Register worker" in log
    assert "Registered to" not in proc.log.read_text(errors="replace")
    if not tls.loopback:  # its own address: the refused handshakes are w3's
        assert f"TLS handshake failed with remote 'tls://{w3.addr}:" in log


# -- the settings, without a cluster -------------------------------------------------------------

def test_make_security_maps_to_distributed_settings(tmp_path):
    from distributed.security import Security

    sec = make_security({"ca_file": "ca.pem", "cert": "c.pem", "key": "c.key"})
    assert (sec.tls_ca_file, sec.tls_client_cert, sec.tls_client_key) == \
        ("ca.pem", "c.pem", "c.key")
    assert sec.require_encryption is True       # distributed's default once TLS is set
    assert make_security({"ca_file": "a", "cert": "b",
                          "require_encryption": False}).require_encryption is False
    given = Security(tls_ca_file="x")
    assert make_security(given) is given and make_security(None) is None
    with pytest.raises(ValueError, match="unknown key 'keyfile'; allowed keys: ca_file, "
                                         "cert, key, require_encryption"):
        make_security({"keyfile": "k"})
    with pytest.raises(TypeError, match="security.require_encryption must be True or False"):
        make_security({"require_encryption": "yes"})
    # no security given: the record follows distributed's configuration
    import dask
    with dask.config.set({"distributed.comm.tls.ca-file": "/x/ca.pem",
                          "distributed.comm.tls.client.cert": "/x/c.pem",
                          "distributed.comm.tls.client.key": "/x/c.key",
                          "distributed.comm.require-encryption": True}):
        assert security_record("tls://h:1") == {
            "tls": True, "settings": "dask.config", "require_encryption": True,
            "ca_file": "/x/ca.pem", "cert": "/x/c.pem"}
    assert security_record(None) == {"tls": False}
    assert security_record("tcp://h:1")["tls"] is False
    err = pickle.loads(pickle.dumps(ClusterSecurityError("TLS required: x")))
    assert type(err) is ClusterSecurityError and str(err) == "TLS required: x"


def test_connect_security_needs_a_scheduler():
    with pytest.raises(ValueError, match="give scheduler_address"):
        daskwp.connect(security={"ca_file": "a", "cert": "b"})


def test_job_security_settings_are_checked(tmp_path):
    """Paths relative to the job file, files that must be readable, a running scheduler,
    and --tls-* flags that replace single keys of the file's security."""
    from daskwp.cli import build_parser, main
    from daskwp.jobs import ConfigError, load_config

    (tmp_path / "ca.pem").write_text("x")
    (tmp_path / "c.pem").write_text("x")
    job = tmp_path / "job.yaml"
    job.write_text("input: in.txt\noutput: out\nscheduler_address: tls://h:8786\n"
                   "security:\n  ca_file: ca.pem\n  cert: c.pem\n")
    cfg = load_config(job)
    assert cfg.security == {"ca_file": str(tmp_path / "ca.pem"),
                            "cert": str(tmp_path / "c.pem")}
    assert pickle.loads(pickle.dumps(cfg)) == cfg
    cfg = load_config(job, {"security": {"cert": str(tmp_path / "ca.pem"),
                                         "require_encryption": False}})
    assert cfg.security == {"ca_file": str(tmp_path / "ca.pem"),
                            "cert": str(tmp_path / "ca.pem"), "require_encryption": False}
    with pytest.raises(ConfigError, match=r"security.key: cannot read '.*nokey.pem': No such"):
        load_config(job, {"security": {"key": str(tmp_path / "nokey.pem")}})
    with pytest.raises(ConfigError, match="security applies to a running scheduler"):
        load_config(job, ["scheduler_address=synchronous"])
    with pytest.raises(ConfigError, match="unknown key 'crt'"):
        load_config(job, ["security={crt: c.pem}"])
    ns = build_parser().parse_args(["run", str(job), "--tls-key", "k.pem",
                                    "--no-tls-require-encryption"])
    from daskwp.cli import _job_values
    assert _job_values(ns)["security"] == {"key": "k.pem", "require_encryption": False}
    rc = main(["run", str(job), "--tls-cert", str(tmp_path / "missing.pem")])
    assert rc == 2
