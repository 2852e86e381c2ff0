"""receipt_bytes.py: the bytes a receipt's Ed25519 signature covers, rebuilt outside
Kinetic as docs/receipts.md ("Canonical JSON") specifies, by the receipt's version:

- version 2 and later: RFC 8785 (JCS) of the receipt without "signature", written by the
  rfc8785 package (an independent JCS implementation);
- version 1 (legacy): Python's compact json.dumps, which that form was defined to equal.

openssl checks a signature against them, as a reader without Kinetic would."""
import json
import os
import subprocess
import tempfile

import rfc8785


def signed_bytes(receipt):
    body = {k: v for k, v in receipt.items() if k != "signature"}
    if receipt["receipt"] == 1:
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    return rfc8785.dumps(body)


def openssl_verifies(receipt, message=None):
    """Whether openssl accepts the receipt's signature over message (default: the bytes
    signed_bytes rebuilds)."""
    msg_bytes = signed_bytes(receipt) if message is None else message
    sig = receipt["signature"]
    der = bytes.fromhex("302a300506032b6570032100" + sig["public_key"])
    with tempfile.TemporaryDirectory(prefix="kn_sig_") as d:
        msg, sigf, pem = (os.path.join(d, n) for n in ("msg.bin", "sig.bin", "pub.pem"))
        with open(msg, "wb") as f:
            f.write(msg_bytes)
        with open(sigf, "wb") as f:
            f.write(bytes.fromhex(sig["ed25519"]))
        subprocess.run(["openssl", "pkey", "-pubin", "-inform", "DER", "-out", pem], input=der,
                       check=True, capture_output=True)
        p = subprocess.run(["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", pem, "-rawin",
                            "-in", msg, "-sigfile", sigf], capture_output=True)
        return p.returncode == 0
