"""TLS on the NATS client port of a team appliance (docs/security.md).

The operator gives a certificate, its key and the CA that signed it (``CTXPRESS_NATS_TLS_CERT``, ``_KEY``,
``_CA``), or ``ctxpress up`` generates a private CA and a server certificate for a test set-up under
``<home>/tls`` (keys mode 0600). Every credentials file ``ctxpress users`` writes carries the CA's certificate, so
an editor verifies the server without any other file.
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

from ctxpress_core.errors import CtxpressError
from ctxpress_core.settings import Settings

CA_DAYS = 3650
SERVER_DAYS = 825  # what browsers and most TLS stacks still accept for a leaf certificate


class TlsConfigError(CtxpressError):
    pass


@dataclass(frozen=True)
class TlsFiles:
    cert: Path
    key: Path
    ca: Path

    def ca_pem(self) -> str:
        return self.ca.read_text()


def tls_dir(settings: Settings) -> Path:
    return settings.state_dir / "tls"


def server_names(settings: Settings) -> list[str]:
    """Names and addresses a client may use for this appliance's NATS: the certificate lists them all."""
    names = ["localhost", "127.0.0.1", "::1", socket.gethostname(), socket.getfqdn()]
    for host in (settings.nats_bind_host, settings.bind_host):
        if host and host not in ("0.0.0.0", "::"):
            names.append(host)
    try:
        names.extend(info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None))
    except OSError:
        pass
    return list(dict.fromkeys(n for n in names if n))


def ensure_tls_files(settings: Settings) -> TlsFiles:
    """The operator's files when all three are set, otherwise this appliance's own (generated once)."""
    given = (settings.nats_tls_cert, settings.nats_tls_key, settings.nats_tls_ca)
    if any(given):
        if not all(given):
            raise TlsConfigError("set all of CTXPRESS_NATS_TLS_CERT, CTXPRESS_NATS_TLS_KEY and CTXPRESS_NATS_TLS_CA, "
                                 "or none (ctxpress then generates a CA and a certificate for a test set-up)")
        files = TlsFiles(*(Path(p).expanduser() for p in given))  # type: ignore[arg-type]
        missing = [str(p) for p in (files.cert, files.key, files.ca) if not p.is_file()]
        if missing:
            raise TlsConfigError(f"TLS files not found: {', '.join(missing)}")
        return files
    root = tls_dir(settings)
    files = TlsFiles(root / "server.pem", root / "server-key.pem", root / "ca.pem")
    if not all(p.exists() for p in (files.cert, files.key, files.ca)):
        generate(root, server_names(settings))
    return files


def generate(root: Path, names: list[str], *, client_auth: bool = False) -> None:
    """A private CA (its key stays in ``root``) and a server certificate for ``names``; with ``client_auth`` also
    for the TLS client side (a NATS node routing to the others presents it)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    from ctxpress_core.private_files import write_private_file

    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"ctxpress CA {socket.gethostname()}")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    alt: list[x509.GeneralName] = []
    for name in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt.append(x509.DNSName(name))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=SERVER_DAYS))
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  *([ExtendedKeyUsageOID.CLIENT_AUTH] if client_auth else [])]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    private = (serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    write_private_file(root / "ca-key.pem", ca_key.private_bytes(pem, *private).decode())
    write_private_file(root / "server-key.pem", key.private_bytes(pem, *private).decode())
    (root / "server.pem").write_bytes(cert.public_bytes(pem))
    (root / "ca.pem").write_bytes(ca.public_bytes(pem))  # written last: its presence means the set is whole


def client_context(ca_pem: str) -> ssl.SSLContext:
    """What a client verifies the appliance's NATS with: only certificates this CA signed, for the host named."""
    try:
        return ssl.create_default_context(cadata=ca_pem)
    except ssl.SSLError as exc:
        raise TlsConfigError(f"unusable CA certificate: {exc}") from None
