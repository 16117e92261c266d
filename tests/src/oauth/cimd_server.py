"""A client's own metadata document (OAuth Client ID Metadata Documents), served over https.

argv[1]: {"caPath": where to write the CA certificate (PEM), "name": the client's name,
          "redirectUris": [...]}
Makes a CA and a certificate for 127.0.0.1 signed by it (the daemon trusts the CA through
`oauth.client_ca_file`), serves `/client.json` (whose `client_id` is its own URL) on a free
port, and prints {"url": …} once listening. Runs until killed.
"""

import datetime
import http.server
import ipaddress
import json
import ssl
import sys
import tempfile

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

cfg = json.loads(sys.argv[1])
now = datetime.datetime.now(datetime.timezone.utc)
span = (now - datetime.timedelta(hours=1), now + datetime.timedelta(days=1))

ca_key = ec.generate_private_key(ec.SECP256R1())
ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "harness-tests CA")])
ca = (
    x509.CertificateBuilder()
    .subject_name(ca_name)
    .issuer_name(ca_name)
    .public_key(ca_key.public_key())
    .serial_number(x509.random_serial_number())
    .not_valid_before(span[0])
    .not_valid_after(span[1])
    .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
    .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
    .sign(ca_key, hashes.SHA256())
)
leaf_key = ec.generate_private_key(ec.SECP256R1())
leaf = (
    x509.CertificateBuilder()
    .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
    .issuer_name(ca_name)
    .public_key(leaf_key.public_key())
    .serial_number(x509.random_serial_number())
    .not_valid_before(span[0])
    .not_valid_after(span[1])
    .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    .sign(ca_key, hashes.SHA256())
)
with open(cfg["caPath"], "wb") as f:
    f.write(ca.public_bytes(serialization.Encoding.PEM))
chain = tempfile.NamedTemporaryFile(suffix=".pem", delete=False)
chain.write(leaf.public_bytes(serialization.Encoding.PEM))
chain.write(leaf_key.private_bytes(
    serialization.Encoding.PEM,
    serialization.PrivateFormat.PKCS8,
    serialization.NoEncryption(),
))
chain.close()

document = {}


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/client.json":
            self.send_error(404)
            return
        body = json.dumps(document).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(chain.name)
server.socket = context.wrap_socket(server.socket, server_side=True)
url = f"https://127.0.0.1:{server.server_address[1]}/client.json"
document.update({
    "client_id": url,
    "client_name": cfg["name"],
    "redirect_uris": cfg["redirectUris"],
    "token_endpoint_auth_method": "none",
    "grant_types": ["authorization_code", "refresh_token"],
    "response_types": ["code"],
})
print(json.dumps({"url": url}), flush=True)
server.serve_forever()
