"""ONNX-ML models as scikit-learn, LightGBM and XGBoost converters write them, against ONNX Runtime: the
interpreter and the compiled code."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import cuvil

from .helpers import run_ort

sklearn = pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")
from sklearn import ensemble, linear_model, pipeline, preprocessing, svm  # noqa: E402
from sklearn.compose import ColumnTransformer  # noqa: E402
from sklearn.datasets import make_classification, make_regression  # noqa: E402
from sklearn.impute import SimpleImputer  # noqa: E402

RNG = np.random.default_rng(0)


def _data(classes=None, n=120, features=6):
    if classes is None:
        x, y = make_regression(n, features, noise=0.3, random_state=0)
    else:
        x, y = make_classification(n, features, n_informative=4, n_classes=classes, random_state=0)
    return x.astype(np.float32), y


def _to_onnx(est, x, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return skl2onnx.to_onnx(est, x[:1], options={id(est): options} if options else None, target_opset=None)


def _check(proto, x, rtol=1e-5, atol=1e-5):
    """Interpreter and compiled code both match ONNX Runtime on x (labels exactly, scores closely)."""
    want = run_ort(proto, {proto.graph.input[0].name: x})
    loaded = cuvil.load_onnx(proto)
    for got in (loaded(x), loaded.optimize()(x)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            w = np.asarray(w) if not isinstance(w, list) else np.asarray([[d[k] for k in sorted(d)] for d in w])
            assert g.shape == w.shape, (g.shape, w.shape)
            if w.dtype.kind in "iu":
                np.testing.assert_array_equal(g, w)
            else:
                np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


CLASSIFIERS = [
    ("random-forest-3", lambda: ensemble.RandomForestClassifier(10, max_depth=5, random_state=0), 3),
    ("random-forest-2", lambda: ensemble.RandomForestClassifier(10, max_depth=5, random_state=0), 2),
    ("gradient-boosting-3", lambda: ensemble.GradientBoostingClassifier(n_estimators=10, max_depth=3), 3),
    ("gradient-boosting-2", lambda: ensemble.GradientBoostingClassifier(n_estimators=10, max_depth=3), 2),
    ("extra-trees-3", lambda: ensemble.ExtraTreesClassifier(5, max_depth=4, random_state=0), 3),
    ("logistic-3", lambda: linear_model.LogisticRegression(max_iter=500), 3),
    ("logistic-2", lambda: linear_model.LogisticRegression(max_iter=500), 2),
    ("svc-rbf-3", lambda: svm.SVC(kernel="rbf", gamma=0.1), 3),
    ("svc-linear-2", lambda: svm.SVC(kernel="linear"), 2),
    ("svc-poly-4", lambda: svm.SVC(kernel="poly", degree=2), 4),
]


@pytest.mark.parametrize("name,make,classes", CLASSIFIERS, ids=[c[0] for c in CLASSIFIERS])
def test_classifiers(name, make, classes):
    x, y = _data(classes)
    est = make().fit(x, y)
    # kernel sums in float32 over every support vector: ONNX Runtime adds them in another order
    _check(_to_onnx(est, x, zipmap=False), x, atol=1e-4 if name.startswith("svc") else 1e-5)


REGRESSORS = [
    ("random-forest", lambda: ensemble.RandomForestRegressor(10, max_depth=5, random_state=0)),
    ("gradient-boosting", lambda: ensemble.GradientBoostingRegressor(n_estimators=20, max_depth=3)),
    ("linear", lambda: linear_model.LinearRegression()),
    ("svr-rbf", lambda: svm.SVR(kernel="rbf", gamma=0.1)),
    ("svr-linear", lambda: svm.SVR(kernel="linear")),
    ("svr-poly", lambda: svm.SVR(kernel="poly", degree=3, gamma=0.05)),
]


@pytest.mark.parametrize("name,make", REGRESSORS, ids=[r[0] for r in REGRESSORS])
def test_regressors(name, make):
    x, y = _data()
    est = make().fit(x, y)
    _check(_to_onnx(est, x), x, rtol=1e-4, atol=1e-3)


def test_zipmap_output_is_the_probabilities():
    """ZipMap's list of {label: probability} maps comes back as the [rows, classes] tensor, columns in label order."""
    x, y = _data(3)
    _check(_to_onnx(ensemble.RandomForestClassifier(5, max_depth=4, random_state=0).fit(x, y), x), x)


def test_pipeline_with_preprocessing():
    """StandardScaler and an imputer on float columns, OneHotEncoder on integer-valued columns, then a forest."""
    x, y = _data(3)
    cats = RNG.integers(0, 4, (len(x), 2)).astype(np.float32)
    x = np.concatenate([x, cats], axis=1)
    x[:5, 1] = np.nan
    pre = ColumnTransformer([
        ("num", pipeline.make_pipeline(SimpleImputer(), preprocessing.StandardScaler()), list(range(6))),
        ("cat", preprocessing.OneHotEncoder(handle_unknown="ignore"), [6, 7])])
    est = pipeline.make_pipeline(pre, ensemble.RandomForestClassifier(8, max_depth=4, random_state=0)).fit(x, y)
    _check(_to_onnx(est, x), x)


def test_scaler_normalizer_binarizer():
    x, _ = _data()
    for est in (preprocessing.StandardScaler(), preprocessing.Normalizer("l1"), preprocessing.Normalizer("l2"),
                preprocessing.Normalizer("max"), preprocessing.Binarizer(threshold=0.2),
                preprocessing.MinMaxScaler()):
        _check(_to_onnx(est.fit(x), np.abs(x) if isinstance(est, preprocessing.Normalizer) else x),
               np.abs(x) if isinstance(est, preprocessing.Normalizer) else x)


def test_lightgbm_and_xgboost():
    lightgbm = pytest.importorskip("lightgbm")
    xgboost = pytest.importorskip("xgboost")
    onnxmltools = pytest.importorskip("onnxmltools")
    from onnxmltools.convert.common.data_types import FloatTensorType
    x, y = _data(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lgb = lightgbm.LGBMClassifier(n_estimators=10, num_leaves=8, verbose=-1).fit(x, y)
        xgb = xgboost.XGBClassifier(n_estimators=10, max_depth=3).fit(x, y)
        xr, yr = _data()
        xgbr = xgboost.XGBRegressor(n_estimators=10, max_depth=3).fit(xr, yr)
        types = [("input", FloatTensorType([None, x.shape[1]]))]
        protos = [onnxmltools.convert_lightgbm(lgb, initial_types=types, zipmap=False),
                  onnxmltools.convert_xgboost(xgb, initial_types=types)]
        reg = onnxmltools.convert_xgboost(xgbr, initial_types=types)
    for proto in protos:
        _check(proto, x, rtol=1e-4, atol=1e-5)
    _check(reg, xr, rtol=1e-4, atol=1e-3)


def _ml_model(node, x_shape=(None, 3), opset_ml=3, out=("y",)):
    from onnx import TensorProto, helper
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in out])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx.ml", opset_ml),
                                                   helper.make_opsetid("", 21)], ir_version=10)


def _mixed_regressor(**overrides):
    """Two trees using every comparison, NaN routed by nodes_missing_value_tracks_true, leaves with 2 targets."""
    from onnx import helper
    attrs = dict(
        nodes_treeids=[0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1], nodes_nodeids=[0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6],
        nodes_featureids=[0, 1, 0, 0, 0, 2, 0, 1, 0, 0, 0, 0],
        nodes_modes=["BRANCH_LEQ", "BRANCH_GT", "LEAF", "LEAF", "LEAF", "BRANCH_EQ", "BRANCH_NEQ", "BRANCH_GTE",
                     "LEAF", "LEAF", "LEAF", "LEAF"],
        nodes_values=[0.1, -0.3, 0, 0, 0, 0.5, 1.0, 0.0, 0, 0, 0, 0],
        nodes_truenodeids=[1, 2, 0, 0, 0, 1, 3, 5, 0, 0, 0, 0], nodes_falsenodeids=[4, 3, 0, 0, 0, 2, 4, 6, 0, 0, 0, 0],
        nodes_missing_value_tracks_true=[1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0],
        target_treeids=[0, 0, 0, 1, 1, 1, 1, 1], target_nodeids=[2, 3, 4, 3, 4, 5, 6, 6],
        target_ids=[0, 1, 0, 0, 1, 0, 1, 0], target_weights=[1.0, 2.0, 3.0, 10.0, 20.0, 30.0, 40.0, 50.0],
        n_targets=2, base_values=[0.5, -0.5], aggregate_function="AVERAGE")
    attrs.update(overrides)
    return helper.make_node("TreeEnsembleRegressor", ["x"], ["y"], domain="ai.onnx.ml", **attrs)


def _check_reference(proto, x):
    """Against ONNX's reference where ONNX Runtime departs from the spec: it drops the base value of a target no
    leaf reached has a weight for, and reads TreeEnsemble's post_transform codes 1 and 2 swapped."""
    from onnx.reference import ReferenceEvaluator
    (want,) = ReferenceEvaluator(proto).run(None, {"x": x})
    loaded = cuvil.load_onnx(proto)
    for got in (loaded(x)[0], loaded.optimize()(x)[0]):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_every_comparison_and_missing_values():
    x = RNG.standard_normal((50, 3)).astype(np.float32)
    x[::7, 0] = np.nan
    x[::5, 2] = 0.5
    x[3::9, 0] = 1.0
    x[::11, 1] = np.nan
    _check_reference(_ml_model(_mixed_regressor()), x)


def test_tree_ensemble_of_ml_opset_5():
    from onnx import helper, numpy_helper
    node = helper.make_node(
        "TreeEnsemble", ["x"], ["y"], domain="ai.onnx.ml", n_targets=2, aggregate_function=1,
        tree_roots=[0, 2], nodes_featureids=[0, 1, 2], nodes_splits=numpy_helper.from_array(np.float32([0, .5, -.2])),
        nodes_modes=numpy_helper.from_array(np.uint8([0, 3, 1])), nodes_truenodeids=[1, 0, 2],
        nodes_trueleafs=[0, 1, 1], nodes_falsenodeids=[1, 1, 3], nodes_falseleafs=[1, 1, 1],
        nodes_missing_value_tracks_true=[1, 0, 0], leaf_targetids=[0, 1, 0, 1],
        leaf_weights=numpy_helper.from_array(np.float32([1, 2, 3, 4])))
    x = RNG.standard_normal((40, 3)).astype(np.float32)
    x[::6, 0] = np.nan
    _check_reference(_ml_model(node, opset_ml=5), x)


@pytest.mark.parametrize("overrides,match", [
    ({"nodes_falsenodeids": [1, 3, 0, 0, 0, 2, 4, 6, 0, 0, 0, 0]}, "tree 0 has more than one root"),
    ({"nodes_featureids": [0, 7, 0, 0, 0, 2, 0, 1, 0, 0, 0, 0]}, "reads feature 7, but x has 3"),
    ({"nodes_falsenodeids": [9, 3, 0, 0, 0, 2, 4, 6, 0, 0, 0, 0]}, r"successor \(0, 9\) is neither"),
    ({"aggregate_function": "MAX"}, "aggregate_function MAX is not supported"),
])
def test_malformed_trees_are_named(overrides, match):
    with pytest.raises(cuvil.CuvilError, match=match):
        cuvil.load_onnx(_ml_model(_mixed_regressor(**overrides)))


def test_a_cycle_is_refused_not_walked_forever():
    from onnx import helper, numpy_helper
    node = helper.make_node(
        "TreeEnsemble", ["x"], ["y"], domain="ai.onnx.ml", n_targets=1, tree_roots=[0], nodes_featureids=[0, 1],
        nodes_splits=numpy_helper.from_array(np.float32([0, 0])), nodes_modes=numpy_helper.from_array(np.uint8([0, 0])),
        nodes_truenodeids=[1, 0], nodes_trueleafs=[0, 0], nodes_falsenodeids=[0, 0], nodes_falseleafs=[1, 1],
        leaf_targetids=[0], leaf_weights=numpy_helper.from_array(np.float32([1])))
    with pytest.raises(cuvil.ShapeError, match="do not form trees"):
        cuvil.load_onnx(_ml_model(node, opset_ml=5))


@pytest.mark.parametrize("rows", [1, 15, 16, 17, 64, 65, 130])
def test_forest_at_every_lane_split(rows):
    """Row counts around the kernel's 16-row lanes and 64-row blocks (the rows left over walk 16 trees at a time):
    a forest of 21 trees, so the last group of trees is partial, with NaN inputs routed by sklearn's own NaN support."""
    x, y = _data(3, n=200)
    x[::9, 2] = np.nan
    est = ensemble.RandomForestClassifier(21, max_depth=6, random_state=0).fit(x, y)
    xt = x[:rows].copy()
    xt[::4, 0] = np.nan
    _check(_to_onnx(est, x, zipmap=False), xt)


@pytest.mark.parametrize("trees,features", [(1, 1), (1, 6), (3, 1)])
def test_one_tree_and_one_feature(trees, features):
    x, y = _data(n=150, features=features)
    est = ensemble.GradientBoostingRegressor(n_estimators=trees, max_depth=3).fit(x, y)
    _check(_to_onnx(est, x), x, rtol=1e-4, atol=1e-3)


def test_deep_unbalanced_trees():
    """Unlimited depth on noisy data: trees of very different depths, many steps past a shallow tree's leaves."""
    x, y = _data(n=400, features=4)
    y = y + RNG.standard_normal(len(y)) * 50
    est = ensemble.RandomForestRegressor(5, random_state=0).fit(x, y)
    assert max(t.get_depth() for t in est.estimators_) >= 12
    _check(_to_onnx(est, x), x, rtol=1e-4, atol=1e-3)


def test_f64_chain_of_ml_opset_5():
    """Double thresholds and inputs (24-byte packed nodes): a TreeEnsemble chain of 40 nodes, NaN going true at odd
    ones, against ONNX's reference (skl2onnx's double trees do not pass ONNX's own type check)."""
    from onnx import TensorProto, helper, numpy_helper
    depth = 40
    node = helper.make_node(
        "TreeEnsemble", ["x"], ["y"], domain="ai.onnx.ml", n_targets=1, aggregate_function=1, tree_roots=[0],
        nodes_featureids=[0] * depth, nodes_splits=numpy_helper.from_array(np.arange(depth) / 3.0),
        nodes_modes=numpy_helper.from_array(np.uint8([i % 4 for i in range(depth)])),
        nodes_truenodeids=list(range(depth)), nodes_trueleafs=[1] * depth,
        nodes_falsenodeids=list(range(1, depth)) + [depth], nodes_falseleafs=[0] * (depth - 1) + [1],
        nodes_missing_value_tracks_true=[i % 2 for i in range(depth)], leaf_targetids=[0] * (depth + 1),
        leaf_weights=numpy_helper.from_array(np.arange(depth + 1, dtype=np.float64) ** 1.5))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [None, 1])],
                              [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx.ml", 5), helper.make_opsetid("", 21)],
                              ir_version=10)
    x = np.concatenate([np.arange(-1, 14, 0.25) + 1e-9, [np.nan]]).reshape(-1, 1)
    _check_reference(proto, x)


def _chain(depth: int, mode: str):
    """One tree of `depth` nodes in a chain: node i sends x0 `mode` i to leaf i, else on to node i + 1."""
    from onnx import helper
    n = 2 * depth + 1
    interior = list(range(depth))
    return helper.make_node(
        "TreeEnsembleRegressor", ["x"], ["y"], domain="ai.onnx.ml", n_targets=1,
        nodes_treeids=[0] * n, nodes_nodeids=list(range(n)), nodes_featureids=[0] * n,
        nodes_modes=[mode] * depth + ["LEAF"] * (depth + 1), nodes_values=[float(i) for i in interior] + [0.0] * (
            depth + 1), nodes_truenodeids=[depth + i for i in interior] + [0] * (depth + 1),
        nodes_falsenodeids=[i + 1 for i in interior[:-1]] + [n - 1] + [0] * (depth + 1),
        nodes_missing_value_tracks_true=[i % 2 for i in interior] + [0] * (depth + 1),
        target_treeids=[0] * (depth + 1), target_nodeids=list(range(depth, n)), target_ids=[0] * (depth + 1),
        target_weights=[float(k) for k in range(depth + 1)])


@pytest.mark.parametrize("mode", ["BRANCH_LEQ", "BRANCH_GT", "BRANCH_NEQ"])
def test_a_chain_of_60_nodes(mode):
    x = np.concatenate([np.arange(-2, 62, 0.5), [np.nan, np.inf, -np.inf]]).astype(np.float32).reshape(-1, 1)
    _check(_ml_model(_chain(60, mode), x_shape=(None, 1)), x)


@pytest.mark.parametrize("threshold", [np.nan, np.inf, -np.inf])
def test_every_comparison_with_extreme_thresholds(threshold):
    """A NaN threshold fails every comparison but NEQ; infinite ones compare as numbers (the packed kernel swaps the
    successors of GT, GTE and NEQ, which must not change that)."""
    x = RNG.standard_normal((60, 3)).astype(np.float32)
    x[::7, 0] = np.nan
    x[::5, 1] = np.inf
    x[::6, 2] = -np.inf
    values = [threshold if v else 0 for v in [1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0]]
    _check_reference(_ml_model(_mixed_regressor(nodes_values=values)), x)
