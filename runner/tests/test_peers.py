"""Peers are found through ldconfig and the multiarch library dirs; missing ones are noted."""

from __future__ import annotations

import platform

import pytest
from mallard_runner.peers import find_peers, library_dirs, multiarch_triplet, sha256_file
from mallard_runner.testbed import collect

from .conftest import first_cpu


def test_glibc_is_always_there_without_a_preload():
    found, missing = find_peers(["glibc"])
    assert found["glibc"].library is None and not missing
    assert found["glibc"].sha256 and len(found["glibc"].sha256) == 64


def test_installed_peers_resolve_to_real_libraries_of_this_arch():
    found, missing = find_peers()
    assert set(found) | set(missing) == {"glibc", "jemalloc", "mimalloc", "tcmalloc"}
    for name, p in found.items():
        if p.library is None:
            continue
        assert p.library.exists() and p.sha256 == sha256_file(p.library)
        with open(p.library, "rb") as f:
            head = f.read(20)
        assert head[:4] == b"\x7fELF"
        machine = int.from_bytes(head[18:20], "little")
        assert machine == {"x86_64": 62, "aarch64": 183}.get(platform.machine(), machine), name
    for why in missing.values():
        assert "found" in why


def test_unknown_peer_is_reported_not_raised():
    found, missing = find_peers(["hoard"])
    assert not found and "hoard" in missing


def test_multiarch_dirs_follow_the_triplet():
    triplet = multiarch_triplet()
    assert triplet.startswith(platform.machine().replace("arm64", "aarch64"))
    assert str(library_dirs()[0]).endswith(triplet)


def test_testbed_fields():
    tb = collect([first_cpu()])
    assert tb.arch == platform.machine()
    assert tb.cpus == str(first_cpu())
    assert tb.page_size > 0 and tb.libc.startswith("glibc ")
    assert tb.thp in ("always", "madvise", "never", "unknown")
    assert tb.compiler.split()[0] in ("gcc", "clang")
    assert tb.cpu_model and tb.kernel == platform.release()


# -- the operator's catalogue entries -----------------------------------------------------
def test_operator_catalogue_entries(tmp_path, crash_lib):
    from mallard_runner.peers import parse_catalogue
    from mallard_runner.settings import RunnerSettings

    assert parse_catalogue(f"mine={crash_lib}, ") == {"mine": crash_lib}
    found, missing = find_peers(["mine", "glibc"], operator={"mine": crash_lib})
    assert found["mine"].library == crash_lib and not missing
    assert "mine" in find_peers(operator={"mine": crash_lib})[0]
    text = tmp_path / "text.so"
    text.write_text("not ELF")
    for entry, why in [("mine", "expected name="), (f"glibc={crash_lib}", "C library"),
                       (f"a b={crash_lib}", "not an allocator name"),
                       ("mine=lib.so", "absolute"), (f"mine={text}", "ELF shared object"),
                       (f"m={crash_lib},m={crash_lib}", "twice"),
                       (f"m={tmp_path}/none.so", "ELF shared object")]:
        with pytest.raises(ValueError, match=why):
            parse_catalogue(entry)
    with pytest.raises(ValueError, match="catalogue entry"):
        RunnerSettings(catalogue="mine=relative.so")
    assert RunnerSettings(catalogue=f"mine={crash_lib}").catalogue_entries() == {
        "mine": crash_lib}
