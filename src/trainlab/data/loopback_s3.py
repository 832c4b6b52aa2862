"""An S3-compatible object store on loopback, for tests and benchmarks (the dev extra: moto).

    with loopback_s3(tmp_dir) as s3:
        s3.upload(local_shards, "s3://data/shards")
        subprocess.run([...], env={**os.environ, **s3.env})   # data.root=s3://data/shards

litdata reads S3 through obstore, which refuses plain http and a certificate that is its
own CA, so a CA and a server certificate for 127.0.0.1 signed by it are generated here;
`SSL_CERT_FILE` points obstore at the CA, `AWS_CA_BUNDLE` boto3. moto's in-memory S3 app
is served by werkzeug (what `moto_server` runs) in a thread, so GET requests can be counted.
"""

import collections
import datetime
import ipaddress
import logging
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


def tls_files(folder: Path) -> tuple[Path, Path, Path]:
    """A CA certificate, and a server certificate for 127.0.0.1 signed by it with its key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def certificate(subject, issuer, key, signer, ca):
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
            builder = builder.add_extension(san, critical=False).add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
        return builder.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    pem = serialization.Encoding.PEM
    ca, cert, key_file = folder / "ca.pem", folder / "cert.pem", folder / "key.pem"
    ca.write_bytes(certificate("test CA", "test CA", ca_key, ca_key, True).public_bytes(pem))
    cert.write_bytes(certificate("127.0.0.1", "test CA", key, ca_key, False).public_bytes(pem))
    key_file.write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return ca, cert, key_file


@dataclass
class LoopbackS3:
    env: dict[str, str]  # what a client process needs: endpoint, credentials, CA
    gets: collections.Counter = field(default_factory=collections.Counter)  # GETs per path

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.env["AWS_ENDPOINT_URL"],
            verify=self.env["AWS_CA_BUNDLE"],
            aws_access_key_id=self.env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=self.env["AWS_SECRET_ACCESS_KEY"],
            region_name=self.env["AWS_REGION"],
        )

    def upload(self, folder: Path, uri: str) -> None:
        """Every file under ``folder`` to ``s3://bucket/prefix/<relative path>``."""
        bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        client = self.client()
        if bucket not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
            client.create_bucket(Bucket=bucket)
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(folder)}")


@contextmanager
def loopback_s3(folder: Path):
    """Serve moto's S3 on https://127.0.0.1:<free port> until the block ends."""
    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    ca, cert, key = tls_files(Path(folder))
    app = DomainDispatcherApplication(create_backend_app)
    s3 = LoopbackS3(env={})

    def counting(environ, start_response):
        if environ["REQUEST_METHOD"] == "GET":
            s3.gets[environ["PATH_INFO"]] += 1
        return app(environ, start_response)

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # not a line per request
    server = make_server("127.0.0.1", 0, counting, threaded=True, ssl_context=(str(cert), str(key)))
    s3.env.update(
        AWS_ENDPOINT_URL=f"https://127.0.0.1:{server.server_port}",
        AWS_ACCESS_KEY_ID="test",
        AWS_SECRET_ACCESS_KEY="test",
        AWS_REGION="us-east-1",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_CA_BUNDLE=str(ca),  # boto3
        SSL_CERT_FILE=str(ca),  # obstore
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield s3
    finally:
        server.shutdown()
