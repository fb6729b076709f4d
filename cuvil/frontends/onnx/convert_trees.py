"""ONNX-ML's tree ensembles (TreeEnsembleRegressor, TreeEnsembleClassifier, TreeEnsemble of ai.onnx.ml 5) as the
IR's `tree_ensemble` over a flattened node table, with base values, averaging, the classifiers' labels and the
post transform around it. The binary classifier's scores follow ONNX Runtime (the spec leaves them open)."""
from __future__ import annotations

import numpy as np

from ...ir.dtypes import DType
from ...ops.ml import MISSING_TRUE, MODES
from .registry import converter

ML = "ai.onnx.ml"
_POST = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")  # TreeEnsemble's post_transform codes
_AGGREGATE = ("AVERAGE", "SUM", "MIN", "MAX")
_MEMBER = 6  # TreeEnsemble's BRANCH_MEMBER mode code


def attr_floats(ctx, name: str, default=()) -> np.ndarray:
    """A float list attribute, or its `_as_tensor` twin (ai.onnx.ml 3 and later)."""
    t = ctx.attr(f"{name}_as_tensor")
    return np.asarray(t if t is not None else ctx.attr(name, list(default)), np.float64).reshape(-1)


def int_labels(ctx, name: str) -> list:
    """A classifier's integer class labels (attribute `name`); string labels are refused."""
    labels = ctx.attr(name)
    if not labels:
        raise ctx.unsupported("has string class labels; Cuvil computes numeric tensors only")
    return labels


def ml_input(ctx):
    """Input 0 as a float tensor (ML ops take int64 and int32 too, computing in float)."""
    x = ctx.x(0)
    return x if x.type.dtype in (DType.f32, DType.f64) else ctx.cast(x, DType.f32)


def post_transform(ctx, scores, kind: str):
    if kind == "NONE":
        return scores
    if kind == "LOGISTIC":
        return ctx.b.sigmoid(scores)
    if kind == "SOFTMAX":
        return ctx.b.softmax(scores, axis=-1)
    raise ctx.unsupported(f"post_transform {kind} is not supported (NONE, LOGISTIC and SOFTMAX are)")


class Forest:
    """The node table of `tree_ensemble` built from per-node lists, each tree's nodes keyed by (tree, node id)."""

    def __init__(self, ctx, features: int):
        self.ctx, self.features = ctx, features
        self.rows, self.thresholds, self.interior, self.leaves = [], [], {}, {}

    def add_leaf(self, key) -> int:
        return self.leaves.setdefault(key, len(self.leaves))

    def add_node(self, key, feature: int, threshold: float, kind: int) -> None:
        if not 0 <= feature < self.features:
            raise self.ctx.error(f"node {key} reads feature {feature}, but x has {self.features}")
        self.interior[key] = len(self.rows)
        self.rows.append([feature, 0, 0, kind])
        self.thresholds.append(threshold)

    def ref(self, key) -> int:
        """The table entry of a successor: a node index, or -k-1 for leaf k."""
        if key in self.interior:
            return self.interior[key]
        if key in self.leaves:
            return -self.leaves[key] - 1
        raise self.ctx.error(f"a node's successor {key} is neither a node nor a leaf of its tree")

    def link(self, key, true_key, false_key) -> None:
        row = self.rows[self.interior[key]]
        row[1], row[2] = self.ref(true_key), self.ref(false_key)

    def emit(self, x, roots: list, weights: np.ndarray):
        """The `tree_ensemble` op, after checking that every walk from a root ends in a leaf."""
        depth = self._depths(roots)
        table = np.asarray([[r, depth[r] if r >= 0 else 0] for r in roots], np.int64).reshape(-1, 2)
        nodes = np.asarray(self.rows, np.int64).reshape(-1, 4)
        thresholds = np.asarray(self.thresholds, x.type.dtype.numpy)
        c = self.ctx
        return c.b.tree_ensemble(x, c.const(nodes), c.const(thresholds), c.const(table), c.const(weights))

    def _depths(self, roots: list) -> dict:
        """Node -> the most nodes a walk from it passes, by a depth-first search from the roots that fails when a
        walk comes back to a node still on its path (then it would never end)."""
        depth, on_path = {}, set()
        for root in roots:
            if root < 0 or root in depth:
                continue
            stack = [(root, 0)]
            on_path.add(root)
            while stack:
                j, k = stack.pop()
                children = [c for c in self.rows[j][1:3] if c >= 0]
                if k == len(children):
                    depth[j] = 1 + max((depth[c] for c in children), default=0)
                    on_path.discard(j)
                    continue
                stack.append((j, k + 1))
                c = children[k]
                if c in on_path:
                    raise self.ctx.error("the trees' nodes do not form trees (a walk from a root comes back to a node)")
                if c not in depth:
                    on_path.add(c)
                    stack.append((c, 0))
        return depth


def node_kind(mode: int, missing_true) -> int:
    """The `tree_ensemble` kind of an ONNX node: its comparison, and where NaN goes. BRANCH_NEQ sends NaN true
    whatever its missing-value track says (NaN != t holds), as ONNX Runtime and ONNX's reference do."""
    return mode | (MISSING_TRUE if missing_true or MODES[mode] == "BRANCH_NEQ" else 0)


def _features(ctx, x) -> int:
    f = x.type.shape[-1] if x.type.rank == 2 else None
    if not isinstance(f, int):
        raise ctx.unsupported(f"needs x as [rows, features] with a known feature count, got {x.type}")
    return f


def _legacy_forest(ctx, x, prefix: str, n_targets: int, dtype: np.dtype):
    """(raw scores [rows, targets], tree count, class ids) of TreeEnsembleRegressor/Classifier's attributes."""
    tree_ids, node_ids = ctx.attr("nodes_treeids", []), ctx.attr("nodes_nodeids", [])
    modes = ctx.attr("nodes_modes", [])
    n = len(tree_ids)
    lists = {k: ctx.attr(k, [0] * n) for k in ("nodes_featureids", "nodes_truenodeids", "nodes_falsenodeids",
                                               "nodes_missing_value_tracks_true")}
    values = attr_floats(ctx, "nodes_values", [0.0] * n)
    if any(len(v) != n for v in [node_ids, modes, values, *lists.values()]):
        raise ctx.error("the nodes_* attributes have different lengths")
    forest = Forest(ctx, _features(ctx, x))
    for i, (t, nid, mode) in enumerate(zip(tree_ids, node_ids, modes)):
        if mode == "LEAF":
            forest.add_leaf((t, nid))
        elif mode in MODES:
            kind = node_kind(MODES.index(mode), lists["nodes_missing_value_tracks_true"][i])
            forest.add_node((t, nid), lists["nodes_featureids"][i], values[i], kind)
        else:
            raise ctx.unsupported(f"node mode {mode} is not supported ({', '.join(MODES)} and LEAF are)")
    for i, (t, nid, mode) in enumerate(zip(tree_ids, node_ids, modes)):
        if mode != "LEAF":
            forest.link((t, nid), (t, lists["nodes_truenodeids"][i]), (t, lists["nodes_falsenodeids"][i]))
    ids = ctx.attr(f"{prefix}_ids", [])
    weights = np.zeros((len(forest.leaves), n_targets), dtype)
    for t, nid, k, w in zip(ctx.attr(f"{prefix}_treeids", []), ctx.attr(f"{prefix}_nodeids", []), ids,
                            attr_floats(ctx, f"{prefix}_weights")):
        if (t, nid) not in forest.leaves or not 0 <= k < n_targets:
            raise ctx.error(f"weight for target {k} of tree {t} node {nid}: not a leaf, or the target is out of range")
        weights[forest.leaves[(t, nid)], k] += w
    return forest.emit(x, _roots(ctx, forest, tree_ids, node_ids), weights), len(set(tree_ids)), ids, weights


def _roots(ctx, forest: Forest, tree_ids, node_ids) -> list:
    """Each tree's root: its one node that is no other node's successor."""
    referenced = {c for row in forest.rows for c in row[1:3]}
    roots: dict = {}
    for t, nid in zip(tree_ids, node_ids):
        r = forest.ref((t, nid))
        if r not in referenced:
            if roots.setdefault(t, r) != r:
                raise ctx.error(f"tree {t} has more than one root")
    for t in dict.fromkeys(tree_ids):
        if t not in roots:
            raise ctx.error(f"tree {t} has no root (every node is another's successor)")
    return [roots[t] for t in dict.fromkeys(tree_ids)]


def _aggregate(ctx, raw, trees: int, kind: str, base: np.ndarray):
    if kind not in ("SUM", "AVERAGE"):
        raise ctx.unsupported(f"aggregate_function {kind} is not supported (SUM and AVERAGE are)")
    if kind == "AVERAGE" and trees:
        raw = ctx.b.div(raw, ctx.scalar_like(trees, raw))
    if base.size:
        raw = ctx.b.add(raw, ctx.expand(ctx.const(base.astype(raw.type.dtype.numpy)), raw.type.shape))
    return raw


@converter("TreeEnsembleRegressor", domain=ML)
def tree_regressor(ctx):
    x = ml_input(ctx)
    raw, trees, _, _ = _legacy_forest(ctx, x, "target", ctx.attr("n_targets", 1), np.float32)
    y = _aggregate(ctx, raw, trees, ctx.attr("aggregate_function", "SUM"), attr_floats(ctx, "base_values"))
    return [post_transform(ctx, y, ctx.attr("post_transform", "NONE"))]


@converter("TreeEnsembleClassifier", domain=ML)
def tree_classifier(ctx):
    labels = int_labels(ctx, "classlabels_int64s")
    x = ml_input(ctx)
    raw, _, class_ids, weights = _legacy_forest(ctx, x, "class", len(labels), np.float32)
    scores = _aggregate(ctx, raw, 0, "SUM", attr_floats(ctx, "base_values"))
    post = ctx.attr("post_transform", "NONE")
    if len(labels) == 2 and set(class_ids) == {0}:
        return _binary_scores(ctx, scores, post, bool((weights >= 0).all()), labels)
    scores = post_transform(ctx, scores, post)
    return [class_labels(ctx, scores, labels), scores]


def _binary_scores(ctx, scores, post: str, positive: bool, labels):
    """ONNX Runtime's two-class scores from one score s: [1 - s, s] when every weight is positive (label by
    s > 0.5), else [-s, s] or, with LOGISTIC, [sigmoid(-s), sigmoid(s)] (label by s > 0)."""
    b = ctx.b
    s = b.slice(scores, starts=(0,), ends=(1,), axes=(1,))
    if post == "PROBIT" or post not in ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"):
        raise ctx.unsupported(f"post_transform {post} is not supported for two classes")
    if positive:
        z = b.concat(b.sub(ctx.scalar_like(1.0, s), s), s, axis=1)
    elif post == "LOGISTIC":
        z = b.concat(b.sigmoid(b.neg(s)), b.sigmoid(s), axis=1)
    else:
        z = b.concat(b.neg(s), s, axis=1)
    rows = scores.type.shape[0]
    flat = b.reshape(s, shape=(rows,))
    wins = b.gt(flat, ctx.scalar_like(0.5 if positive else 0.0, flat))
    label = b.where(wins, *(ctx.expand(ctx.const(np.int64(v)), (rows,)) for v in (labels[1], labels[0])))
    return [label, z]


def class_labels(ctx, scores, labels):
    """The label of each row's best score (the first of equal ones)."""
    best = ctx.b.argmax(scores, axis=1, keepdims=False)
    return ctx.b.gather(ctx.const(np.asarray(labels, np.int64)), best, axis=0)


def _member_sets(ctx, a: dict) -> dict:
    """Node index -> its set of values, for BRANCH_MEMBER nodes: membership_values holds the sets in node order,
    each ended by a NaN."""
    member_nodes = [i for i, mode in enumerate(a["nodes_modes"]) if mode == _MEMBER]
    if not member_nodes:
        return {}
    values = np.asarray(ctx.attr("membership_values"), np.float64).reshape(-1)
    sets, current = [], []
    for v in values:
        if np.isnan(v):
            sets.append(current)
            current = []
        else:
            current.append(float(v))
    if current:
        sets.append(current)
    if len(sets) < len(member_nodes):
        raise ctx.error(f"membership_values holds {len(sets)} sets for {len(member_nodes)} BRANCH_MEMBER nodes")
    return dict(zip(member_nodes, sets))


@converter("TreeEnsemble", domain=ML)
def tree_ensemble(ctx):
    """ai.onnx.ml 5's TreeEnsemble: node arrays indexed directly, leaves in their own arrays, codes for enums."""
    x = ml_input(ctx)
    a = {k: np.asarray(ctx.attr(k, [])).reshape(-1) for k in (
        "nodes_featureids", "nodes_modes", "nodes_truenodeids", "nodes_falsenodeids", "nodes_trueleafs",
        "nodes_falseleafs", "nodes_missing_value_tracks_true", "tree_roots", "leaf_targetids", "leaf_weights",
        "nodes_splits")}
    forest = Forest(ctx, _features(ctx, x))
    missing = a["nodes_missing_value_tracks_true"]
    members = _member_sets(ctx, a)
    for i, (feature, mode) in enumerate(zip(a["nodes_featureids"], a["nodes_modes"])):
        tracks = i < len(missing) and missing[i]
        flag = MISSING_TRUE if tracks else 0
        if mode == _MEMBER:  # x in {v0, v1, ...}: a chain of BRANCH_EQ nodes that share the true successor
            chain = members[i] or [np.nan]
            for m, value in enumerate(chain):
                forest.add_node(i if m == 0 else ("member", i, m), int(feature), value,
                                MODES.index("BRANCH_EQ") | (flag if m == 0 else 0))
        elif mode < len(MODES):
            forest.add_node(i, int(feature), float(a["nodes_splits"][i]), node_kind(int(mode), tracks))
        else:
            raise ctx.unsupported(f"node {i} has the unknown mode {mode}")
    for k in range(len(a["leaf_weights"])):
        forest.add_leaf(("leaf", k))
    for i in range(len(a["nodes_modes"])):
        true, false = ((("leaf", int(a[f"nodes_{s}nodeids"][i])) if a[f"nodes_{s}leafs"][i] else
                        int(a[f"nodes_{s}nodeids"][i])) for s in ("true", "false"))
        chain = [i] + [("member", i, m) for m in range(1, len(members.get(i) or [0]))]
        for here, after in zip(chain, chain[1:] + [false]):
            forest.link(here, true, after)
    n_targets = ctx.attr("n_targets")
    weights = np.zeros((len(a["leaf_weights"]), n_targets), x.type.dtype.numpy)
    for k, (target, w) in enumerate(zip(a["leaf_targetids"], a["leaf_weights"])):
        if not 0 <= target < n_targets:
            raise ctx.error(f"leaf {k} has target {target}, outside the {n_targets} targets")
        weights[k, target] += w
    roots = [forest.ref(int(r)) for r in a["tree_roots"]]
    raw = forest.emit(x, roots, weights)
    y = _aggregate(ctx, raw, len(roots), _AGGREGATE[ctx.attr("aggregate_function", 1)], np.zeros(0))
    return [post_transform(ctx, y, _POST[ctx.attr("post_transform", 0)])]
