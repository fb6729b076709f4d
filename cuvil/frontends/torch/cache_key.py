"""The artifact-cache key of `cuvil.compile(module, example_inputs)`, taken without `torch.export`.

What decides the exported program, and so the key:
- the code: for every submodule's class, its qualified name and the source file of the class's module, plus
  the versions of torch and of the package the class comes from (transformers, say), and the default arguments,
  closure values and the module globals named by its `forward`;
- the state: every submodule's plain attributes (sizes, flags, configs; `training` is left out since export
  runs in eval mode) and the bytes, dtype and shape of every parameter and buffer;
- the call: the example inputs' structure, dtypes and shapes, `dynamic_shapes`, and the options.

Hashing the weights dominates: a checksum at memory speed in 1 MiB pieces on a thread per CPU
(`cache.keys.arrays_digests`; SHA-256 took GPT-2's 500 MB 0.2 s on 2 cores).
Every byte is hashed (docs/reliability.md says why that keeps the key complete). An attribute whose text is not
stable across processes (an object printed with its address) makes the module uncacheable rather than risk a
wrong hit (logged at INFO with the reason); so does a plain function, whose closure and globals the key cannot
see. Code that `forward` reaches outside the
classes' own files (a helper in another module of the user's) is not covered: after editing only such code,
pass `cache=False` once or clear the cache (`cuvil.cache.clear()`).
"""
from __future__ import annotations

import functools
import inspect
import logging
import re
import sys
import weakref

import torch
import torch.utils._pytree as pytree

from ...cache.keys import Key, arrays_digests, environment, file_digest
from .signature import tensor_to_numpy

_SKIP_ATTRS = frozenset({"training", "_parameters", "_buffers", "_modules", "_non_persistent_buffers_set"})
log = logging.getLogger("cuvil.cache")
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+|object at|<function|<bound method|<lambda>")


class Uncacheable(Exception):
    """The module's key would not be stable across processes (see the module docstring)."""


def module_key(obj, example_inputs, options: dict) -> str | None:
    """The key for compiling `obj` with these inputs and options, or None when it cannot be keyed safely."""
    if not isinstance(obj, torch.nn.Module):
        return None
    try:
        key = Key("torch").add("env", environment()).add("torch", torch.__version__)
        _add_code(key, obj)
        _add_state(key, obj)
        leaves, spec = pytree.tree_flatten(example_inputs)
        key.add("inputs", _describe([_example(x) for x in leaves] + [str(spec)]))
        key.add("options", _describe(sorted(options.items())))
    except Uncacheable as e:
        log.info("not using the artifact cache for %s: %s (it compiles in every process)", type(obj).__name__, e)
        return None
    return key.hexdigest()


def _add_code(key: Key, module: torch.nn.Module) -> None:
    for cls in sorted({type(m) for m in module.modules()}, key=lambda c: (c.__module__, c.__qualname__)):
        key.add("class", f"{cls.__module__}.{cls.__qualname__}").add("source", _source_digest(cls))
        key.add("forward", _describe(_bound_values(cls.forward)))
        key.add("globals", _describe(_global_values(cls.forward)))
        top = sys.modules.get(cls.__module__.partition(".")[0])
        key.add("version", getattr(top, "__version__", ""))


def _bound_values(fn, depth: int = 0) -> list:
    """What `forward` sees besides its code: its default arguments and closure cells (a class made in a loop, say:
    one source, other values). A function in a cell (a decorator's wrapped `forward`) counts by its name and its
    own bound values; its code is keyed with its file or its package's version like the classes'."""
    cells = []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            v = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if inspect.isfunction(v):
            v = [f"{v.__module__}.{v.__qualname__}", _bound_values(v, depth + 1) if depth < 4 else None]
        cells.append(v)
    return [getattr(fn, "__defaults__", None), getattr(fn, "__kwdefaults__", None), cells]


def _global_values(fn) -> list:
    """The module globals that `forward`'s code names (`ACT = torch.relu` or `SCALE = 0.5` set per run, a global
    `nn.Linear`): functions, classes and modules by their qualified names (their code is keyed with its file or
    package), modules' weights by their bytes, values by their text. An object without a stable text counts by its
    type only, as the code it reaches is not covered (see the module docstring)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    names, stack = set(), [code]
    while stack:  # the function's own names and those of the lambdas and comprehensions inside it
        c = stack.pop()
        names.update(c.co_names)
        stack.extend(k for k in c.co_consts if inspect.iscode(k))
    scope = fn.__globals__
    return [(n, _global_value(scope[n])) for n in sorted(names) if n in scope]


def _global_value(v) -> str:
    if inspect.ismodule(v):
        return f"module {v.__name__}"
    if isinstance(v, torch.nn.Module):
        return _describe([f"module {type(v).__qualname__}", [(n, _tensor(t)) for n, t in v.state_dict().items()]])
    if callable(v) and hasattr(v, "__qualname__"):
        return f"{getattr(v, '__module__', '')}.{v.__qualname__}"
    try:
        return _describe(v)
    except Uncacheable:
        return f"object {type(v).__module__}.{type(v).__qualname__}"


@functools.lru_cache(maxsize=None)
def _source_digest(cls) -> str:
    try:
        return file_digest(inspect.getsourcefile(cls))
    except (TypeError, OSError) as e:  # defined in a notebook cell or C: nothing to hash
        raise Uncacheable(f"no source file for {cls.__qualname__}") from e


def _add_state(key: Key, module: torch.nn.Module) -> None:
    texts: dict = {}  # id -> text of the attribute values: one config held by every layer is described once (GPT-2:
    # 39 times, 0.1 s of its warm start); the values stay alive, so their ids are theirs while the key is taken
    for name, m in module.named_modules():
        attrs = sorted((k, v) for k, v in vars(m).items() if k not in _SKIP_ATTRS and not _empty_hooks(k, v))
        key.add(f"attrs {name}", f"list[{', '.join(_described(item, texts) for item in attrs)}]")
    named = [*module.named_parameters(remove_duplicate=False), *module.named_buffers(remove_duplicate=False)]
    for (name, _), text in zip(named, _tensors([t for _, t in named])):
        key.add(f"tensor {name}", text)


def _described(item: tuple, texts: dict) -> str:
    """`_describe` of one (name, value) attribute, the value's text remembered in `texts` by its id."""
    name, value = item
    if id(value) not in texts:
        texts[id(value)] = _describe(value)
    return f"tuple[{_describe(name)}, {texts[id(value)]}]"


def _empty_hooks(name: str, value) -> bool:
    return name.startswith("_") and "hook" in name and not value


def _tensor(t: torch.Tensor) -> str:
    return _tensors([t])[0]


def _tensors(tensors: list) -> list:
    """Each tensor's dtype, shape and bytes' digest (all of them hashed together, on every core)."""
    arrays = [tensor_to_numpy(t.detach().contiguous()).reshape(-1).view("u1") for t in tensors]
    return [f"{t.dtype}{tuple(t.shape)}:{d}" for t, d in zip(tensors, arrays_digests(arrays))]


def _example(x):
    """Export sees an example tensor's type and shape, not its values (other inputs are specialised on)."""
    return f"{x.dtype}{tuple(x.shape)}" if isinstance(x, torch.Tensor) else x


def _describe(value) -> str:
    """A text that identifies `value` in any process; Uncacheable if there is none."""
    if isinstance(value, torch.Tensor):
        return f"tensor({_tensor(value)})"
    if isinstance(value, (list, tuple)):
        return f"{type(value).__name__}[{', '.join(map(_describe, value))}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_describe(k)}: {_describe(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (set, frozenset)):  # sorted: a set's order follows the process's string hash seed
        return f"{type(value).__name__}{{{', '.join(sorted(map(_describe, value)))}}}"
    if isinstance(value, weakref.ref):  # nn.LSTM/GRU keep weak references to their own parameters
        target = value()
        return "weakref(dead)" if target is None else f"weakref({_describe(target)})"
    if isinstance(value, torch.nn.Module):
        return f"module {type(value).__qualname__}"  # its own attributes are keyed under its name
    text = repr(value)
    if _ADDRESS.search(text):
        raise Uncacheable(f"{type(value).__name__} has no stable text: {text[:80]}")
    return f"{type(value).__qualname__}:{text}"
