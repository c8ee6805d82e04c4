"""Signatures checked before loading (model-signing, an offline key pair made here) and the CycloneDX ML-BOM."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from torch import nn

from auditor.cli import run_cli
from auditor.report.render_json import validate_report_dict

pytest.importorskip("model_signing")
pytest.importorskip("cyclonedx")


def _key_pair(folder: Path) -> tuple[Path, Path]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    private, public = folder / "signing.key", folder / "signing.pub.pem"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """keys/, model/ (a checkpoint, a config and a README) and model.sig, signed with model-signing's own signer."""
    from model_signing import signing

    root = tmp_path_factory.mktemp("signed")
    (root / "keys").mkdir()
    (root / "other").mkdir()
    private, _ = _key_pair(root / "keys")
    _key_pair(root / "other")  # another key pair: its public key must not verify the signature
    model = root / "model"
    model.mkdir()
    torch.manual_seed(0)
    torch.save(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()), model / "plain.pt")
    (model / "labels.json").write_text('{"classes": 2}\n')
    (model / "README.md").write_text("a small model\n")
    signing.Config().use_elliptic_key_signer(private_key=private).sign(model, root / "model.sig")
    return root


@pytest.fixture
def work(signed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copytree(signed, tmp_path / "w")
    monkeypatch.chdir(tmp_path / "w")
    torch.set_num_threads(1)
    return tmp_path / "w"


def _verify(*extra: str, key: str = "keys/signing.pub.pem") -> list[str]:
    return ["scan", "model", "--input-shape", "3,16,16", "--verify-signature", "model.sig", "--public-key", key,
            "--json", "r.json", "-q", *extra]


def _no_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if any checkpoint is opened (the static check is the first thing that reads one)."""
    import auditor.audit.refused as refused

    def opened(*args: object, **kwargs: object) -> None:
        raise AssertionError("a checkpoint was opened after the signature check refused the model")

    monkeypatch.setattr(refused, "check_before_loading", opened)


def test_a_valid_signature_lets_the_scan_load_and_says_so(work: Path) -> None:
    assert run_cli(_verify("--sbom", "bom.json")) == 0
    report = json.loads(Path("r.json").read_text())
    validate_report_dict(report)
    assert report["model"]["format"] == "pickled-module"
    assert any("signature model.sig verified before loading" in n for n in report["notes"])


@pytest.mark.parametrize("change", ["tamper a byte", "add a file", "rename a file", "another key"])
def test_a_changed_model_or_wrong_key_is_refused_before_loading(work: Path, change: str,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    key = "keys/signing.pub.pem"
    if change == "tamper a byte":
        data = bytearray((work / "model" / "labels.json").read_bytes())
        data[2] ^= 1
        (work / "model" / "labels.json").write_bytes(bytes(data))
    elif change == "add a file":
        shutil.copy(work / "model" / "plain.pt", work / "model" / "extra.pt")
    elif change == "rename a file":
        (work / "model" / "README.md").rename(work / "model" / "NOTES.md")
    else:
        key = "other/signing.pub.pem"
    _no_loading(monkeypatch)
    assert run_cli(_verify(key=key)) == 1
    report = json.loads(Path("r.json").read_text())
    validate_report_dict(report)
    (finding,) = report["findings"]
    assert finding["rule_id"] == "supply.signature-invalid" and finding["severity"] == "critical"
    assert report["model"]["load_safety"]["loader"].startswith("not loaded")
    assert {p["status"] for p in report["plugins"]} == {"skipped"}
    assert "signature check failed" in " ".join(report["summary"]["reasons"])
    expected = {"tamper a byte": ["changed after signing: labels.json"],
                "add a file": ["added after signing (not in the signature): extra.pt"],
                "rename a file": ["added after signing (not in the signature): NOTES.md",
                                  "removed after signing: README.md"], "another key": []}[change]
    assert finding["evidence"]["problems"] == expected, finding["message"]
    assert all(p in finding["message"] for p in expected)


def test_a_signature_inside_the_model_folder_is_not_hashed(work: Path) -> None:
    """model-signing's CLI leaves the signature out of the hash; so does auditor (the model was signed before it)."""
    shutil.move(work / "model.sig", work / "model" / "model.sig")
    args = _verify()
    args[args.index("model.sig")] = "model/model.sig"
    assert run_cli(args) == 0


def test_an_unsigned_model_is_refused_when_the_policy_requires_a_signature(work: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    Path("auditor.toml").write_text('[supply]\nrequire_signature = true\npublic_key = "keys/signing.pub.pem"\n')
    _no_loading(monkeypatch)
    assert run_cli(["scan", "model", "--json", "r.json", "-q"]) == 1
    (finding,) = json.loads(Path("r.json").read_text())["findings"]
    assert finding["rule_id"] == "supply.unsigned" and finding["severity"] == "high"


def test_signature_flags_need_one_method(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["scan", "model", "--verify-signature", "model.sig", "-q"]) == 4
    assert "exactly one of --public-key" in capsys.readouterr().err
    assert run_cli(["scan", "model", "--verify-signature", "model.sig", "--identity", "me@example.com", "-q"]) == 4
    assert "--identity-provider" in capsys.readouterr().err
    assert run_cli(["scan", "model", "--verify-signature", "nope.sig", "--public-key", "keys/signing.pub.pem"]) == 4
    assert "--verify-signature nope.sig: no such file" in capsys.readouterr().err


def _bom(text: str) -> dict:
    from auditor.report.render_cyclonedx import validation_errors

    assert validation_errors(text) is None
    return json.loads(text)


def test_the_ml_bom_lists_every_file_and_validates(work: Path) -> None:
    Path("auditor.toml").write_text('[scan]\ninput_shape = [3, 16, 16]\n\n[[ignore]]\npath = "model/extra.pt"\n'
                                    'reason = "a copy kept for the record"\n')
    shutil.copy(work / "model" / "plain.pt", work / "model" / "extra.pt")
    assert run_cli(["scan", "model", "--sbom", "bom.json", "--json", "r.json", "-q"]) == 0
    bom, report = _bom(Path("bom.json").read_text()), json.loads(Path("r.json").read_text())
    assert bom["bomFormat"] == "CycloneDX" and bom["specVersion"] == "1.6"
    (model,) = [c for c in bom["components"] if c["type"] == "machine-learning-model"]
    props = {p["name"]: p["value"] for p in model["properties"]}
    assert model["hashes"] == [{"alg": "SHA-256", "content": report["model"]["sha256"]}]
    assert props["auditor:format"] == "pickled-module" and props["auditor:parameters"] == "112"
    assert props["auditor:framework:torch"] == torch.__version__ and "allowlist" in props["auditor:loader"]
    card = model["modelCard"]
    assert "0 skip connection(s)" in card["modelParameters"]["modelArchitecture"]
    assert any("not judged: membership-inference" in x for x in card["considerations"]["technicalLimitations"])
    files = {c["name"]: {p["name"]: p["value"] for p in c["properties"]} for c in bom["components"]
             if c["type"] == "file"}
    assert files["extra.pt"]["auditor:not-audited-reason"].startswith("ignored by auditor.toml [[ignore]]")
    assert files["README.md"]["auditor:not-audited-reason"].startswith("not a checkpoint")
    assert set(files) == {"extra.pt", "README.md", "labels.json"}
    assert run_cli(["scan", "model", "--format", "cyclonedx", "-o", "bom2.json", "-q"]) == 0
    assert _bom(Path("bom2.json").read_text())["components"]


def test_the_ml_bom_carries_measurements_findings_and_overrides(work: Path) -> None:
    """A judged attack's headline: margin, interval, floor and attack in the model card; findings as considerations."""
    from auditor.report.model import Report
    from auditor.report.render_cyclonedx import render_cyclonedx

    assert run_cli(["scan", "model/plain.pt", "--input-shape", "3,16,16", "--json", "r.json", "-q"]) == 0
    report = json.loads(Path("r.json").read_text())
    report["plugins"].append({"name": "membership-inference", "status": "ok", "family": "membership-inference",
                              "headline": [{"name": "auc", "label": "attack AUC", "value": 0.71, "floor": 0.5,
                                            "floor_kind": "coin flip", "margin": 0.21, "ci": [0.15, 0.27],
                                            "threshold": 0.05, "how": "LiRA, 8 shadow models, seed 0"}]})
    report["findings"].append({"rule_id": "privacy.membership-leak", "severity": "medium", "title": "Members leak",
                               "location": "logits", "remediation": ["dp-sgd"], "severity_override": {
                                   "original": "high", "applied": "medium", "pattern": "privacy.*",
                                   "source": "auditor.toml [severity]"}})
    typed = Report.model_validate(report)  # the ML-BOM renders from the typed report
    bom = _bom(render_cyclonedx([typed], not_audited=[("model/README.md", "not a checkpoint")]))
    card = next(c for c in bom["components"] if c["type"] == "machine-learning-model")["modelCard"]
    (metric,) = card["quantitativeAnalysis"]["performanceMetrics"]
    assert metric["type"] == "membership-inference/auc margin over floor" and metric["value"] == "0.21"
    assert metric["confidenceInterval"] == {"lowerBound": "0.15", "upperBound": "0.27"}
    assert "floor 0.5 (coin flip)" in metric["slice"] and "LiRA, 8 shadow models" in metric["slice"]
    risk = next(r for r in card["considerations"]["ethicalConsiderations"] if "membership-leak" in r["name"])
    assert "set by auditor.toml [severity]; the rule says high" in risk["name"]
    assert risk["mitigationStrategy"] == "dp-sgd"


def test_the_library_scan_checks_the_signature_before_loading(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import auditor.audit.pipeline as pipeline
    from auditor.config import ScanConfig
    from auditor.supply import SupplyPolicy

    def opened(*args: object, **kwargs: object) -> None:
        raise AssertionError("the checkpoint was opened after the signature check refused it")

    monkeypatch.setattr(pipeline, "audit", opened)
    (work / "model" / "plain.pt").write_bytes((work / "model" / "plain.pt").read_bytes() + b"\0")
    config = ScanConfig(supply=SupplyPolicy(signature=Path("model.sig"), public_key=Path("keys/signing.pub.pem")))
    report = pipeline.scan("model", config)
    assert report.summary.verdict == "fail" and report.findings[0].rule_id == "supply.signature-invalid"
    assert report.findings[0].evidence["problems"] == ["changed after signing: plain.pt"]


def _certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA and a leaf certificate it issued for digital signatures: (leaf key, leaf cert, CA cert), all PEM."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder.mkdir()
    now = datetime.datetime.now(datetime.timezone.utc)

    def cert(subject: str, key: ec.EllipticCurvePrivateKey, issuer: str, signer: ec.EllipticCurvePrivateKey,
             ca: bool) -> x509.Certificate:
        usage = x509.KeyUsage(digital_signature=not ca, key_cert_sign=ca, crl_sign=ca, content_commitment=False,
                              key_encipherment=False, data_encipherment=False, key_agreement=False,
                              encipher_only=False, decipher_only=False)
        return (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
                .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
                .add_extension(usage, critical=True).sign(signer, hashes.SHA256()))

    ca_key, leaf_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    paths = folder / "leaf.key", folder / "leaf.pem", folder / "ca.pem"
    paths[0].write_bytes(leaf_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                serialization.NoEncryption()))
    paths[1].write_bytes(cert("model builder", leaf_key, "test CA", ca_key, False).public_bytes(
        serialization.Encoding.PEM))
    paths[2].write_bytes(cert("test CA", ca_key, "test CA", ca_key, True).public_bytes(serialization.Encoding.PEM))
    return paths


def test_a_certificate_signature_verifies_against_its_chain_offline(work: Path) -> None:
    from model_signing import signing

    key, leaf, ca = _certificates(work / "pki")
    _, _, other_ca = _certificates(work / "other-pki")
    signing.Config().use_certificate_signer(private_key=key, signing_certificate=leaf,
                                            certificate_chain=[ca]).sign(Path("model"), Path("cert.sig"))
    args = ["scan", "model", "--input-shape", "3,16,16", "--verify-signature", "cert.sig", "--json", "r.json", "-q"]
    assert run_cli([*args, "--certificate-chain", str(ca)]) == 0
    assert run_cli([*args, "--certificate-chain", str(other_ca)]) == 1  # a chain that does not lead to the signer
    assert json.loads(Path("r.json").read_text())["findings"][0]["rule_id"] == "supply.signature-invalid"
