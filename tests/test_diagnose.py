"""Each failure signature in assets/diagnoses.toml against the exact text the real tool prints.

The lines come from the tools' sources (torch's cpp_extension.py, CUDA's host_config.h) or from
real logs (uv's issue tracker, pip builds); where a message changed between versions, each form
has its own case.
"""

from __future__ import annotations

import pytest

from steps.apply.diagnose import diagnose, no_space
from steps.core.errors import InputError
from steps.core.nextcommands import RESUME_COMMAND
from steps.known.tables import DiagnosesTable, load_table, parse_table

LOG = "/var/log/mlsetup/run/extensions.flash-attn.build.log"

# torch <= 2.7: RuntimeError(CUDA_MISMATCH_MESSAGE.format(...)), the template begins with '\n'
# and wraps after "compile"; pip indents a build's output by 6 spaces.
MISMATCH_TORCH_27 = [
    "        raise RuntimeError(CUDA_MISMATCH_MESSAGE.format(cuda_str_version, "
    "torch.version.cuda))",
    "      RuntimeError:",
    "      The detected CUDA version (13.1) mismatches the version that was used to compile",
    "      PyTorch (12.8). Please make sure to use the same CUDA versions.",
]
# torch >= 2.8: RuntimeError(CUDA_MISMATCH_MESSAGE, cuda_str_version, torch.version.cuda) with a
# %s template whose two literals join as "compilePyTorch": Python prints the argument tuple.
MISMATCH_TORCH_28 = [
    "      RuntimeError: ('The detected CUDA version (%s) mismatches the version that was used to "
    "compilePyTorch (%s). Please make sure to use the same CUDA versions.', '13.1', '12.8')",
]

# Each signature's real output lines, as assets/diagnoses.toml cites them (`examples`).
CASES = {sig.id: sig.examples for sig in load_table("diagnoses.toml", DiagnosesTable).signature}


@pytest.mark.parametrize(
    "lines", [MISMATCH_TORCH_27, MISMATCH_TORCH_28], ids=["torch2.7", "torch2.8"]
)
def test_cuda_major_mismatch_both_forms_with_their_versions(lines):
    d = diagnose(["building 'flash_attn_2_cuda' extension", *lines], 1, LOG)
    assert d is not None and d.id == "cuda-major-mismatch"
    assert "nvcc is CUDA 13.1 but torch was built with CUDA 12.8" in d.why


@pytest.mark.parametrize(
    ("signature", "line"), [(sig, line) for sig, lines in CASES.items() for line in lines]
)
def test_each_signature_matches_the_real_line(signature, line):
    d = diagnose(["some earlier output", *line.split("\n")], 1, LOG)
    assert d is not None and d.id == signature, d
    assert "{" not in d.why + d.next  # every placeholder filled


GOOD = {"id": "x-y", "pattern": "boom", "why": "w", "next": "n", "examples": ["boom"]}


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"examples": []}, "signature[1].examples"),  # no real line cited
        ({"pattern": "un(closed"}, "signature[1].pattern"),
        ({"id": "Not An Id"}, "signature[1].id"),
        ({"nxt": "typo"}, "signature[1].nxt: unknown key"),
        ({"why": None}, "signature[1].why"),
        ({"id": "x-y"}, "'x-y' is used twice"),
        ({"next": "run {1}"}, 'signature[1].next = "run {1}": {1} is filled by nothing'),
        ({"why": "see {logfile}"}, "signature[1].why"),
    ],
)
def test_a_malformed_signature_is_refused_naming_the_key(change, named):
    bad = {k: v for k, v in {**GOOD, "id": "other", **change}.items() if v is not None}
    named_here = [{**GOOD, "id": i} for i in ("out-of-memory", "no-space")]
    with pytest.raises(InputError) as exc:
        parse_table(
            {"signature": [GOOD, bad, *named_here]}, DiagnosesTable, "assets/diagnoses.toml"
        )
    assert str(exc.value).startswith("assets/diagnoses.toml: ")
    assert named in str(exc.value), str(exc.value)


def test_the_signatures_the_code_names_are_required():
    table = {"signature": [{**GOOD, "id": "out-of-memory"}]}
    with pytest.raises(InputError) as exc:
        parse_table(table, DiagnosesTable, "assets/diagnoses.toml")
    assert "no signature no-space (steps/apply/diagnose.py uses it)" in str(exc.value)


def test_undefined_symbol_names_the_module_and_symbol():
    d = diagnose(CASES["undefined-symbol"], 1, LOG)
    assert "flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so" in d.why
    assert "_ZN3c104cuda9SetDeviceEi" in d.why


def test_python_download_says_the_real_next_step_not_check_the_network():
    d = diagnose(CASES["python-download"], 1, LOG)
    assert "venv.python" in d.next and "UV_PYTHON_INSTALL_MIRROR" in d.next
    # the same download failing on a proxy's certificate is the certificate's fault
    tls = diagnose(
        [*CASES["python-download"], "  Caused by: invalid peer certificate: UnknownIssuer"], 1, LOG
    )
    assert tls.id == "tls-unknown-issuer" and "update-ca-certificates" in tls.next


def test_module_verification_failed_is_not_a_secure_boot_rejection():
    # printed when an unsigned module loads (Secure Boot not enforcing): the driver works
    line = (
        "[    5.123456] nvidia: module verification failed: signature and/or required key "
        "missing - tainting kernel"
    )
    d = diagnose([line, "E: Sub-process /usr/bin/dpkg returned an error code (1)"], 1, LOG)
    assert d is None or d.id != "secure-boot-rejected"


def test_secure_boot_next_step_names_both_distributions_keys():
    d = diagnose(CASES["secure-boot-rejected"][:1], 1, LOG)
    assert "/var/lib/shim-signed/mok/MOK.der" in d.next and "/var/lib/dkms/mok.pub" in d.next


def test_resolver_conflict_points_at_the_log():
    d = diagnose(CASES["resolver-conflict"], 1, LOG)
    assert LOG in d.why + d.next


def test_fabric_manager_mismatch_names_both_versions_and_cuda_802_says_start_it():
    line = (
        "nv-fabricmanager[7]: fabric manager NVIDIA GPU driver interface version 580.82.07 "
        "don't match with driver version 580.95.05. Please update with matching NVIDIA driver "
        "package."
    )
    d = diagnose([line], 1, "/l.log")
    assert d is not None and d.id == "fabric-manager-version"
    assert "Fabric Manager 580.82.07" in d.why and "driver 580.95.05" in d.why
    d = diagnose(["RuntimeError: ... Error 802: system not yet initialized"], 1, "/l.log")
    assert d is not None and d.id == "cuda-system-not-ready"
    assert "systemctl enable --now nvidia-fabricmanager" in d.next


def test_signatures_say_resume_and_the_code_fills_it():
    """The resume command is written once (steps/core/nextcommands.py): a signature says {resume},
    which no_space() fills with the command that goes on when no saved run can resume."""
    table = load_table("diagnoses.toml", DiagnosesTable)
    assert not [s.id for s in table.signature if RESUME_COMMAND in s.next]
    assert "{resume}" in next(s for s in table.signature if s.id == "no-space").next
    shown = diagnose(["OSError: [Errno 28] No space left on device"], 1, "/var/log/x.log")
    assert shown is not None and shown.next.endswith(f"then: {RESUME_COMMAND}")
    then = "sudo mlsetup apply --answers /root/a.toml"
    assert no_space("/var/lib", then).next.endswith(f"then: {then}")
