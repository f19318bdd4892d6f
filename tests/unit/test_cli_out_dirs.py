"""A run folder (``--out``) that cannot be written is one line and exit 2 before anything runs,
for ``wsprof attach`` and ``wsprof demo``, never a traceback; a folder writable by the user's
own private group (umask 002 on Debian/Ubuntu/Fedora) is the user's own, one writable by any
other group is refused."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import pyspy_skip_reason

from wsprof.cli import main
from wsprof.cli.options import make_run_folder
from wsprof.errors import InputError
from wsprof.trace.outputs import is_private_group


@pytest.fixture(params=["under-read-only-folder", "read-only-folder"])
def unwritable(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """A folder path nobody here can write in: inside (or at) a folder of mode 0o500; where
    this user writes there anyway (root), a path under a regular file, which nobody can
    create."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        if os.access(ro, os.W_OK):  # root ignores the mode
            if request.param == "read-only-folder":
                pytest.skip("this user (root) can write in any folder")
            blocker = tmp_path / "file.txt"
            blocker.write_text("x")
            yield blocker / "out"
        else:
            yield ro / "out" if request.param == "under-read-only-folder" else ro
    finally:
        ro.chmod(stat.S_IRWXU)


def _one_line(err: str, path: Path) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    [line] = lines
    assert "Traceback" not in err
    assert line.startswith(f"wsprof: error: {path}: cannot write the run folder ("), line
    assert line.endswith("; choose a writable folder with --out"), line
    return line


def test_attach_to_an_unwritable_out_is_one_line(
    unwritable: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    skip = pyspy_skip_reason()
    if skip:
        pytest.skip(skip)
    # This very process is the target: the run folder is refused before py-spy starts.
    assert main(["attach", str(os.getpid()), "--duration", "1", "--out", str(unwritable)]) == 2
    captured = capsys.readouterr()
    _one_line(captured.err, unwritable)
    assert captured.out == ""


def test_demo_to_an_unwritable_out_is_one_line(
    unwritable: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--steps", "2", "--no-pyspy", "--out", str(unwritable)]) == 2
    captured = capsys.readouterr()
    _one_line(captured.err, unwritable)
    assert captured.out == ""  # no rank was started


# -- group-writable folders (umask 002) ------------------------------------------------------


def _other_groups() -> dict[str, int]:
    """Groups that are not root's private group, by what makes them so: ``users`` (not its
    primary group), ``nogroup`` (``nobody``'s primary group), one listing members."""
    import grp

    found: dict[str, int] = {}
    for g in grp.getgrall():
        if g.gr_name in ("users", "nogroup") and g.gr_gid != 0:
            found[g.gr_name] = g.gr_gid
        elif g.gr_mem and "with-members" not in found and g.gr_gid != 0:
            found["with-members"] = g.gr_gid
    return found


needs_root_private_group = pytest.mark.skipif(
    os.geteuid() != 0 or not is_private_group(0, 0),
    reason="needs root (chown) and root's group to be its private group (gid 0, no members)",
)


@needs_root_private_group
@pytest.mark.parametrize("where", ["existing", "parent"])
def test_a_folder_writable_by_the_users_private_group_is_accepted(
    tmp_path: Path, where: str
) -> None:
    """root's own 0775 folder, group ``root``: what ``mkdir`` gives under umask 002 where each
    user has a group of their own. Used as the run folder, or as the folder a run folder is
    made in (made 0700 whatever the umask)."""
    project = tmp_path / "project"
    project.mkdir()
    os.chown(project, 0, 0)
    project.chmod(0o775)
    target = project if where == "existing" else project / "wsprof-out" / "run"
    old = os.umask(0o002)
    try:
        created = make_run_folder(str(target), "--out", allow_shared=False)
    finally:
        os.umask(old)
    if where == "parent":
        assert created == [str(target), str(target.parent)]
        for d in created:
            assert stat.S_IMODE(os.stat(d).st_mode) == 0o700, d
    assert stat.S_IMODE(project.stat().st_mode) == 0o775  # never changed


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder another group needs root")
@pytest.mark.parametrize("group", ["users", "nogroup", "with-members", "root-other-write"])
@pytest.mark.parametrize("where", ["existing", "parent"])
def test_a_folder_writable_by_another_group_is_refused(
    tmp_path: Path, group: str, where: str
) -> None:
    if group == "root-other-write":
        gid, mode = 0, 0o777  # the private group, but others may write too
    else:
        gid = _other_groups().get(group, -1)
        if gid < 0:
            pytest.skip(f"no group {group!r} here")
        mode = 0o775
    project = tmp_path / "project"
    project.mkdir()
    os.chown(project, 0, gid)
    project.chmod(mode)
    target = project if where == "existing" else project / "run"
    with pytest.raises(InputError) as e:
        make_run_folder(str(target), "--out", allow_shared=False)
    [line] = str(e.value).splitlines()
    assert line.startswith(f"{project}: ")
    assert f"is writable by group or others (mode {mode:04o}" in line, line
    if mode == 0o775:
        assert f"(gid {gid}) not your private group)" in line, line
    assert "--allow-shared-out" in line
    assert list(project.iterdir()) == []  # nothing made in it
