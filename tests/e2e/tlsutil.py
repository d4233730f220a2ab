"""Test certificates for the TLS end-to-end tests, made with the openssl CLI.

make_pki(DIR) writes a small PKI into DIR and returns a Pki whose
attributes are file paths. Everything is generated fresh per test session
(a few seconds: three RSA-2048 keys, the rest ECDSA).

Server side (all signed by the root CA `ca`, except `chain`):
  ecdsa      P-256, CN=main-ecdsa, SAN localhost a.test
  p384       P-384, CN=main-p384,  SAN localhost a.test
  rsa        RSA-2048, CN=main-rsa, SAN localhost a.test
  rsa_enc    the rsa key encrypted with PASSPHRASE, PKCS#8 (cert: rsa)
  rsa_enc_trad  the same, traditional PEM encryption (Proc-Type/DEK-Info)
  b_ecdsa    P-256, CN=b-ecdsa, SAN b.test
  b_rsa      RSA-2048, CN=b-rsa, SAN b.test
  wild       P-256, CN=wild-ecdsa, SAN *.wild.test
  xwild      P-256, CN=x-wild, SAN x.wild.test (exact name inside the wildcard)
  cnonly     P-256, CN=cn.test, no SAN at all
  expired    P-256, CN=expired, SAN localhost, valid 2020-01-01..2020-01-02
  chain      P-256, CN=chained, SAN chain.test, signed by intermediate `inter`;
             chain.cert holds leaf + intermediate, chain.combined holds
             leaf + intermediate + key (a PEM with key and chain)
Client side:
  client_ca  a CA for client certificates; `client` (CN=client1,
             O=Sluice Test) is signed by it, `rogue` (CN=rogue) by
             another CA.
Each pair X is exposed as X.cert / X.key (a Pair).
"""

import os
import ssl
import subprocess

PASSPHRASE = "s3cret pass"


class Pair:
    def __init__(self, cert, key, cn):
        self.cert = cert
        self.key = key
        self.cn = cn
        self.combined = None

    def der(self):
        """DER bytes of the leaf (the first certificate in the cert file)."""
        with open(self.cert) as f:
            pem = f.read()
        first = pem[:pem.index("-----END CERTIFICATE-----") + len("-----END CERTIFICATE-----")]
        return ssl.PEM_cert_to_DER_cert(first)

    def entry(self, passphrase=None, key=True):
        """A listeners[].tls.certificates[] entry."""
        e = {"cert": self.cert}
        if key:
            e["key"] = self.key
        if passphrase is not None:
            e["passphrase"] = passphrase
        return e


class Pki:
    pass


def _run(args, cwd):
    p = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise RuntimeError("%s failed (%d):\n%s%s" % (" ".join(args), p.returncode, p.stdout, p.stderr))
    return p.stdout


def _key(d, name, kind):
    path = os.path.join(d, name + ".key")
    if kind == "rsa":
        _run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
              "-out", path], d)
    else:
        curve = {"p256": "P-256", "p384": "P-384"}[kind]
        _run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:" + curve,
              "-out", path], d)
    return path


def _ca(d, name, cn, kind="p256", signer=None):
    key = _key(d, name, kind)
    cert = os.path.join(d, name + ".pem")
    ext = os.path.join(d, name + ".ext")
    with open(ext, "w") as f:
        f.write("basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n"
                "subjectKeyIdentifier=hash\n")
    if signer is None:
        _run(["openssl", "req", "-x509", "-new", "-key", key, "-subj", "/CN=" + cn, "-days", "3650",
              "-sha256", "-out", cert, "-addext", "basicConstraints=critical,CA:TRUE",
              "-addext", "keyUsage=critical,keyCertSign,cRLSign"], d)
    else:
        csr = os.path.join(d, name + ".csr")
        _run(["openssl", "req", "-new", "-key", key, "-subj", "/CN=" + cn, "-out", csr], d)
        _run(["openssl", "x509", "-req", "-in", csr, "-CA", signer.cert, "-CAkey", signer.key,
              "-set_serial", str(_serial()), "-days", "3650", "-sha256", "-extfile", ext,
              "-out", cert], d)
    return Pair(cert, key, cn)


_SERIAL = [1000]


def _serial():
    _SERIAL[0] += 1
    return _SERIAL[0]


def _leaf(d, name, kind, subj, sans, ca, usage="serverAuth"):
    key = _key(d, name, kind)
    csr = os.path.join(d, name + ".csr")
    cert = os.path.join(d, name + ".pem")
    ext = os.path.join(d, name + ".ext")
    with open(ext, "w") as f:
        f.write("basicConstraints=CA:FALSE\nextendedKeyUsage=%s\n" % usage)
        if sans:
            f.write("subjectAltName=%s\n" % ",".join("DNS:" + s for s in sans))
    _run(["openssl", "req", "-new", "-key", key, "-subj", subj, "-out", csr], d)
    _run(["openssl", "x509", "-req", "-in", csr, "-CA", ca.cert, "-CAkey", ca.key,
          "-set_serial", str(_serial()), "-days", "825", "-sha256", "-extfile", ext,
          "-out", cert], d)
    cn = subj.rsplit("CN=", 1)[1].split("/")[0]
    return Pair(cert, key, cn)


def _expired_leaf(d, name, ca):
    """A leaf whose validity ended in 2020 (the OpenSSL 3.0 CLI has no
    not-before/not-after for `x509 -req`; `openssl ca` has -startdate/-enddate)."""
    key = _key(d, name, "p256")
    csr = os.path.join(d, name + ".csr")
    cert = os.path.join(d, name + ".pem")
    cadir = os.path.join(d, "ca-db")
    os.makedirs(os.path.join(cadir, "new"), exist_ok=True)
    open(os.path.join(cadir, "index.txt"), "w").close()
    with open(os.path.join(cadir, "serial"), "w") as f:
        f.write("%04X\n" % _serial())
    cnf = os.path.join(cadir, "ca.cnf")
    with open(cnf, "w") as f:
        f.write("[ca]\ndefault_ca = dflt\n[dflt]\n"
                "database = %s/index.txt\nnew_certs_dir = %s/new\nserial = %s/serial\n"
                "certificate = %s\nprivate_key = %s\ndefault_md = sha256\n"
                "policy = any\nunique_subject = no\ncopy_extensions = none\n"
                "x509_extensions = ext\n"
                "[any]\ncommonName = supplied\n"
                "[ext]\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
                "subjectAltName=DNS:localhost\n" % (cadir, cadir, cadir, ca.cert, ca.key))
    _run(["openssl", "req", "-new", "-key", key, "-subj", "/CN=expired", "-out", csr], d)
    _run(["openssl", "ca", "-batch", "-notext", "-config", cnf, "-in", csr, "-out", cert,
          "-startdate", "20200101000000Z", "-enddate", "20200102000000Z"], d)
    return Pair(cert, key, "expired")


def _cat(out, *paths):
    with open(out, "w") as f:
        for p in paths:
            with open(p) as g:
                f.write(g.read())
    return out


def make_pki(d):
    d = str(d)
    p = Pki()
    p.dir = d
    p.passphrase = PASSPHRASE
    p.ca = _ca(d, "ca", "Sluice Test Root")
    p.ecdsa = _leaf(d, "ecdsa", "p256", "/CN=main-ecdsa", ["localhost", "a.test"], p.ca)
    p.p384 = _leaf(d, "p384", "p384", "/CN=main-p384", ["localhost", "a.test"], p.ca)
    p.rsa = _leaf(d, "rsa", "rsa", "/CN=main-rsa", ["localhost", "a.test"], p.ca)
    p.b_ecdsa = _leaf(d, "b-ecdsa", "p256", "/CN=b-ecdsa", ["b.test"], p.ca)
    p.b_rsa = _leaf(d, "b-rsa", "rsa", "/CN=b-rsa", ["b.test"], p.ca)
    p.wild = _leaf(d, "wild", "p256", "/CN=wild-ecdsa", ["*.wild.test"], p.ca)
    p.xwild = _leaf(d, "xwild", "p256", "/CN=x-wild", ["x.wild.test"], p.ca)
    p.cnonly = _leaf(d, "cnonly", "p256", "/CN=cn.test", [], p.ca)
    p.expired = _expired_leaf(d, "expired", p.ca)

    enc = os.path.join(d, "rsa-enc.key")
    _run(["openssl", "pkey", "-in", p.rsa.key, "-aes256", "-passout", "pass:" + PASSPHRASE,
          "-out", enc], d)
    p.rsa_enc = Pair(p.rsa.cert, enc, p.rsa.cn)
    enc = os.path.join(d, "rsa-enc-trad.key")     # "Proc-Type: 4,ENCRYPTED" PEM
    _run(["openssl", "pkey", "-in", p.rsa.key, "-traditional", "-aes256", "-passout",
          "pass:" + PASSPHRASE, "-out", enc], d)
    p.rsa_enc_trad = Pair(p.rsa.cert, enc, p.rsa.cn)

    p.inter = _ca(d, "inter", "Sluice Test Intermediate", signer=p.ca)
    leaf = _leaf(d, "chain-leaf", "p256", "/CN=chained", ["chain.test"], p.inter)
    p.chain = Pair(_cat(os.path.join(d, "chain.pem"), leaf.cert, p.inter.cert), leaf.key, "chained")
    p.chain.combined = _cat(os.path.join(d, "chain-combined.pem"), leaf.cert, p.inter.cert, leaf.key)

    p.client_ca = _ca(d, "client-ca", "Sluice Client CA")
    p.client = _leaf(d, "client", "p256", "/O=Sluice Test/CN=client1", [], p.client_ca,
                     usage="clientAuth")
    p.other_ca = _ca(d, "other-ca", "Some Other CA")
    p.rogue = _leaf(d, "rogue", "p256", "/CN=rogue", [], p.other_ca, usage="clientAuth")

    p.garbage = os.path.join(d, "garbage.pem")
    with open(p.garbage, "w") as f:
        f.write("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n")
    p.empty = os.path.join(d, "empty.pem")
    open(p.empty, "w").close()
    return p


def ticket_keys_file(path, keys):
    """Write a ticket_keys file: KEYS are 48-byte strings, first = current."""
    import base64
    with open(path, "w") as f:
        for k in keys:
            assert len(k) == 48
            f.write(base64.b64encode(k).decode() + "\n")
    return path
