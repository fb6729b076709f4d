"""Cache-key parts: the digest of Cuvil's own sources, remembered by the files' stats."""
from __future__ import annotations

import os
import time

from cuvil.cache import keys


def _tree(root, files: dict, age_s: float = 10.0) -> None:
    """Write `files` under `root`, modified `age_s` ago (their inode change time stays now)."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        old = time.time() - age_s
        os.utime(path, (old, old))


def test_a_source_tree_is_read_once_then_known_by_its_stats(tmp_path, monkeypatch):
    monkeypatch.setattr(keys, "RACY_S", -1.0)  # the files were just written: remember them all the same
    root, memo = tmp_path / "pkg", tmp_path / "memo"
    _tree(root, {"a.py": "x = 1\n", "sub/b.c": "int f(void);\n", "notes.txt": "not a source"})
    first = keys.tree_digest(str(root), memo)
    assert first == keys.tree_digest(str(root))  # the same digest with or without the memo
    assert list(memo.iterdir())
    opened = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda p, *a, **k: opened.append(str(p)) or real_open(p, *a, **k))
    assert keys.tree_digest(str(root), memo) == first
    assert not [p for p in opened if p.startswith(str(root))]  # stats only: no source file read


def test_any_edit_of_a_source_changes_the_digest_even_with_a_memo(tmp_path, monkeypatch):
    monkeypatch.setattr(keys, "RACY_S", -1.0)
    root, memo = tmp_path / "pkg", tmp_path / "memo"
    _tree(root, {"a.py": "x = 1\n", "b.h": "#define N 4\n"})
    first = keys.tree_digest(str(root), memo)
    _tree(root, {"b.h": "#define N 5\n"})  # same size, an older time than a fresh write: the inode times differ
    assert keys.tree_digest(str(root), memo) != first
    _tree(root, {"c.py": ""})  # a new file
    assert keys.tree_digest(str(root), memo) not in (first, keys.tree_digest(str(root / "none")))


def test_a_tree_changed_within_the_last_second_is_not_remembered(tmp_path):
    root, memo = tmp_path / "pkg", tmp_path / "memo"
    _tree(root, {"a.py": "x = 1\n"}, age_s=0.0)
    keys.tree_digest(str(root), memo)
    assert not memo.exists() or not list(memo.iterdir())


def test_the_tree_lists_the_files_os_walk_lists(tmp_path):
    """Nested folders, a link to a file (read) and a link to a folder (not followed), in os.walk's order."""
    root = tmp_path / "pkg"
    _tree(root, {"a.py": "", "z/b.c": "", "z/y/c.h": "", "m.txt": "", "zz.py": ""})
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "d.py").write_text("")
    os.symlink(tmp_path / "elsewhere", root / "linked")
    os.symlink(root / "a.py", root / "z" / "e.py")
    want = sorted(os.path.relpath(os.path.join(folder, name), root) for folder, _, names in os.walk(root)
                  for name in names if name.endswith((".py", ".c", ".h")))
    assert [rel for rel, _ in sorted(keys._source_files(str(root), ""))] == want
