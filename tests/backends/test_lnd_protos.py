"""The committed LND stubs are what scripts/gen-lnd-protos.sh makes from the .proto files
(so an edited .proto without regenerated stubs fails here)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = Path("satsgate/backends/lnd/proto")
PROTOS = ("lightning.proto", "invoices.proto", "router.proto")


def test_generated_stubs_match_the_protos(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")  # in the test extra, pinned with protobuf
    (tmp_path / PROTO_DIR).mkdir(parents=True)
    for name in PROTOS:
        shutil.copy(ROOT / PROTO_DIR / name, tmp_path / PROTO_DIR / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-I",
            ".",
            "--python_out=.",
            "--grpc_python_out=.",
            "--pyi_out=.",
            *(str(PROTO_DIR / p) for p in PROTOS),
        ],
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    generated = sorted(p.name for p in (tmp_path / PROTO_DIR).glob("*_pb2*"))
    committed = sorted(p.name for p in (ROOT / PROTO_DIR).glob("*_pb2*"))
    assert generated == committed
    for name in generated:
        assert (tmp_path / PROTO_DIR / name).read_text() == (ROOT / PROTO_DIR / name).read_text(), (
            f"{name} is stale: run scripts/gen-lnd-protos.sh"
        )


def test_the_protos_keep_lnds_names_and_numbers() -> None:
    """A few of LND's facts the backend depends on (from lnd's own .proto files)."""
    from satsgate.backends.lnd.proto import invoices_pb2, lightning_pb2, router_pb2

    invoice = lightning_pb2.Invoice.DESCRIPTOR
    assert invoice.full_name == "lnrpc.Invoice"
    numbers = {f.name: f.number for f in invoice.fields}
    assert numbers["value_msat"] == 23 and numbers["settle_index"] == 17
    assert numbers["amt_paid_msat"] == 20 and numbers["state"] == 21
    assert numbers["r_preimage"] == 3 and numbers["r_hash"] == 4 and numbers["expiry"] == 11
    assert dict(lightning_pb2.Invoice.InvoiceState.items()) == {
        "OPEN": 0,
        "SETTLED": 1,
        "CANCELED": 2,
        "ACCEPTED": 3,
    }
    send = {f.name: f.number for f in router_pb2.SendPaymentRequest.DESCRIPTOR.fields}
    assert send == {
        "payment_request": 5,
        "amt_msat": 12,  # an amountless invoice's amount (a session's return invoice)
        "timeout_seconds": 6,
        "fee_limit_msat": 13,
        "no_inflight_updates": 18,
    }
    hold = {f.name: f.number for f in invoices_pb2.AddHoldInvoiceRequest.DESCRIPTOR.fields}
    assert hold["hash"] == 2 and hold["value_msat"] == 10 and hold["cltv_expiry"] == 7
    services = {
        s.full_name
        for pb in (lightning_pb2, invoices_pb2, router_pb2)
        for s in pb.DESCRIPTOR.services_by_name.values()
    }
    assert services == {"lnrpc.Lightning", "invoicesrpc.Invoices", "routerrpc.Router"}
