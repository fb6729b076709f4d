"""Depthwise conv -> clamps (relu, clip, max/min with a constant) become one library op with a `clip` epilogue;
a bound that is not a constant or a conv result read twice stay as they were; a dense conv takes relu and relu6."""
import numpy as np

from cuvil.passes import FuseLibraryEpilogue

from .helpers import expect, run_passes

RNG = np.random.default_rng(0)
X = [RNG.standard_normal((1, 2, 5, 5)).astype(np.float32) * 8, RNG.standard_normal((2, 1, 3, 3)).astype(np.float32),
     RNG.standard_normal((1, 2, 5, 5)).astype(np.float32)]
CONV = "%0:f32[1,2,5,5] = conv %x, %w {strides = [1, 1], dilations = [1, 1], pads = [1, 1, 1, 1], groups = 2}"


def fuse(ops: str, results: str = "f32[1,2,5,5]") -> str:
    """Run the pass on @main(x, w, b) = CONV then `ops`."""
    text = f"""
        module {{
          func @main(%x: f32[1,2,5,5], %w: f32[2,1,3,3], %b: f32[1,2,5,5]) -> ({results}) {{
            {CONV}
            {ops.strip()}
          }}
        }}"""
    return run_passes(text, FuseLibraryEpilogue(), inputs=X)


def fused(lo: str, hi: str, name: str) -> str:
    return expect(f"""
        %0:f32[1,2,5,5] = fused %x, %w {{kind = "library", name = "{name}"}} {{
        ^(%1: f32[1,2,5,5], %2: f32[2,1,3,3]):
          %3:f32[1,2,5,5] = conv %1, %2 {{strides = [1, 1], dilations = [1, 1], pads = [1, 1, 1, 1], groups = 2}}
          %4:f32[1,2,5,5] = clip %3 {{min = {lo}, max = {hi}}}
          yield %4
        }}""")


def test_relu_then_min_of_a_broadcast_constant_is_relu6_and_the_broadcast_goes():
    got = fuse("""
        %1:f32[] = full {value = 6.0, shape = [], dtype = f32}
        %2:f32[1,2,5,5] = broadcast_to %1 {shape = [1, 2, 5, 5]}
        %3:f32[1,2,5,5] = relu %0
        %4:f32[1,2,5,5] = min %3, %2
        return %4""")
    assert got == fused("0.0", "6.0", "conv_relu_min") + "\nreturn %0"


def test_clip_then_max_with_zero_on_the_left():
    got = fuse("""
        %1:f32[1,2,5,5] = clip %0 {min = -1.0, max = 3.0}
        %2:f32[1,2,5,5] = full {value = 0.0, shape = [1, 2, 5, 5], dtype = f32}
        %3:f32[1,2,5,5] = max %2, %1
        return %3""")
    assert got == fused("0.0", "3.0", "conv_clip_max") + "\nreturn %0"


def test_relu_alone_and_a_broadcast_with_other_users_stays():
    got = fuse("""
        %1:f32[] = full {value = 6.0, shape = [], dtype = f32}
        %2:f32[1,2,5,5] = broadcast_to %1 {shape = [1, 2, 5, 5]}
        %3:f32[1,2,5,5] = relu %0
        %4:f32[1,2,5,5] = add %3, %2
        return %4""")
    assert got == expect("""
        %0:f32[] = full {value = 6.0, shape = [], dtype = f32}
        %1:f32[1,2,5,5] = broadcast_to %0 {shape = [1, 2, 5, 5]}
        %2:f32[1,2,5,5] = fused %x, %w {kind = "library", name = "conv_relu"} {
        ^(%3: f32[1,2,5,5], %4: f32[2,1,3,3]):
          %5:f32[1,2,5,5] = conv %3, %4 {strides = [1, 1], dilations = [1, 1], pads = [1, 1, 1, 1], groups = 2}
          %6:f32[1,2,5,5] = clip %5 {min = 0.0, max = inf}
          yield %6
        }
        %7:f32[1,2,5,5] = add %2, %1
        return %7""")


def test_the_chain_stops_at_a_bound_that_misses_the_others():
    got = fuse("""
        %1:f32[1,2,5,5] = clip %0 {min = 0.0, max = 1.0}
        %2:f32[1,2,5,5] = full {value = 2.0, shape = [1, 2, 5, 5], dtype = f32}
        %3:f32[1,2,5,5] = max %1, %2
        return %3""")
    assert got.startswith(fused("0.0", "1.0", "conv_clip")) and "max %0, %5" in got


NOT_FUSED = {
    "bound-not-constant": """
        %1:f32[1,2,5,5] = max %0, %b
        %2:f32[1,2,5,5] = clip %1 {min = 0.0, max = 6.0}
        return %2""",
    "conv-result-used-twice": """
        %1:f32[1,2,5,5] = relu %0
        %2:f32[1,2,5,5] = add %1, %0
        return %2""",
    "clamp-result-also-returned": """
        %1:f32[1,2,5,5] = clip %0 {min = 0.0, max = 6.0}
        return %1, %0""",
}


def test_no_fusion_where_the_clamp_is_not_the_conv_results_only_use_with_constant_bounds():
    for name, ops in NOT_FUSED.items():
        results = "f32[1,2,5,5], f32[1,2,5,5]" if ops.count("return %1, %0") else "f32[1,2,5,5]"
        got = fuse(ops, results)
        assert "fused" not in got and got.startswith(CONV), name


def test_a_dense_conv_takes_relu_and_relu6_only():
    text = """
        module {
          func @main(%x: f32[1,2,5,5], %w: f32[2,2,3,3]) -> (f32[1,2,5,5]) {
            %0:f32[1,2,5,5] = conv %x, %w {strides = [1, 1], dilations = [1, 1], pads = [1, 1, 1, 1], groups = 1}
            %1:f32[1,2,5,5] = clip %0 {min = 0.0, max = MAX}
            return %1
          }
        }"""
    assert "fused" in run_passes(text.replace("MAX", "6.0"), FuseLibraryEpilogue())
    assert "fused" not in run_passes(text.replace("MAX", "5.0"), FuseLibraryEpilogue())
