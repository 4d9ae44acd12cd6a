"""The ctypes structs mirror include/vcattn.h: the library's own initializers fill them."""
import ctypes

import numpy as np

import vcattn
from vcattn import _lib
from vcattn._lib import lib


def test_attention_params_layout():
    p = _lib.AttentionParams()
    ctypes.memset(ctypes.byref(p), 0xAB, ctypes.sizeof(p))
    lib.vcattn_attention_params_init(ctypes.byref(p), 2, 3, 5, 7, 64, 0x1000, 0x2000, 0x3000, 0x4000)
    assert (p.batch, p.heads, p.seq_q, p.seq_kv, p.head_dim) == (2, 3, 5, 7, 64)
    assert (p.q, p.k, p.v, p.o) == (0x1000, 0x2000, 0x3000, 0x4000)
    assert list(p.q_stride) == [3 * 5 * 64, 5 * 64, 64]
    assert list(p.k_stride) == list(p.v_stride) == [3 * 7 * 64, 7 * 64, 64]
    assert list(p.o_stride) == list(p.q_stride)
    assert p.lse is None and p.softmax_scale == 0.0 and p.num_threads == 0
    assert p.q_lens is None and p.kv_lens is None  # init clears the valid lengths (poisoned above)
    assert ctypes.sizeof(p) == 5 * 8 + 4 * 8 + 12 * 8 + 8 + 8 + 8 + 2 * 8  # int padded to 8; q_lens, kv_lens


def test_gpu_layout_mirror():
    """vcattn_gpu_layout: three int64 then 19 size_t offsets (the Python side reads output_flag)."""
    assert ctypes.sizeof(_lib.GpuLayout) == 3 * 8 + 19 * ctypes.sizeof(ctypes.c_size_t)
    names = [f[0] for f in _lib.GpuLayout._fields_]
    assert names[-6:] == ["output_flag", "direct_rows", "key_norm", "key_order", "lse_q", "total"]


def test_gpu_reference_params_mirror():
    """vcattn_gpu_reference_params: five int64, a double, three pointers, three strides, o."""
    assert ctypes.sizeof(_lib.GpuReferenceParams) == 5 * 8 + 8 + 3 * 8 + 9 * 8 + 8
    names = [f[0] for f in _lib.GpuReferenceParams._fields_]
    assert names[:6] == ["batch", "heads", "rows", "seq_kv", "head_dim", "softmax_scale"] and names[-1] == "o"
    p = _lib.GpuReferenceParams()
    p.batch, p.heads, p.rows, p.seq_kv, p.head_dim = 1, 4, 512, 75600, 128
    p.q = p.k = p.v = p.o = 0x1000
    p.q_stride[:] = p.k_stride[:] = p.v_stride[:] = (128, 128, 128)
    n = ctypes.c_size_t(0)
    st = lib.vcattn_gpu_reference_workspace_size(ctypes.byref(p), ctypes.byref(n))
    if st != _lib.STATUS_NAMES.index("NOT_BUILT"):  # the C test checks the split count; here the fields
        assert st == 0 and n.value == 50 * 4 * 512 * 130 * 4  # 50 splits


def test_kmeans_params_layout():
    k = _lib.KmeansParams()
    ctypes.memset(ctypes.byref(k), 0xCD, ctypes.sizeof(k))
    lib.vcattn_kmeans_params_init(ctypes.byref(k))
    assert (k.clusters, k.iterations, k.seed, k.init_centroids, k.num_threads) == (64, 8, 0, None, 0)


def test_method_config_layout():
    c = _lib.MethodConfig()
    assert lib.vcattn_method_config_get(3, ctypes.byref(c)) == 0  # vsmooth-expcast-8bit
    assert (c.qk_format, c.qk_granularity, c.smooth_k, c.smooth_q, c.v_format, c.v_smooth, c.p_format,
            c.rowsum_from_quantized_p, c.p_scale) == (1, 1, 1, 0, 2, 1, 2, 1, 0)
    assert lib.vcattn_method_config_get(6, ctypes.byref(c)) == 0  # vsmooth-blockmax-8bit
    assert (c.p_format, c.p_scale, c.v_smooth) == (1, 1, 1)
    assert lib.vcattn_method_config_get(7, ctypes.byref(c)) == 0  # vsmooth-split-blockmax-8bit
    assert (c.p_format, c.p_scale, c.v_smooth, c.exact_keys) == (5, 1, 1, 16)
    assert lib.vcattn_method_config_get(1, ctypes.byref(c)) == 0  # sage2-8bit: no exact keys
    assert c.exact_keys == 0
    assert lib.vcattn_method_config_get(8, ctypes.byref(c)) != 0  # past the last method
    assert lib.vcattn_method_default() == 7 and lib.vcattn_method_has_kernel(7) == 1


def test_status_strings_cover_every_status():
    for code, name in enumerate(_lib.STATUS_NAMES):
        s = lib.vcattn_status_string(code).decode()
        assert s and s != "unknown status", name
    assert lib.vcattn_status_string(len(_lib.STATUS_NAMES)).decode() == "unknown status"


def test_fidelity_struct_through_c():
    ref = np.array([1.0, -2.0, 3.0, 0.5], np.float32)
    out = ref + np.array([0.1, 0.0, -0.1, 0.0], np.float32)
    f = vcattn.fidelity(ref, out)
    np.testing.assert_allclose(f["rel_l2"], np.linalg.norm(out - ref) / np.linalg.norm(ref), rtol=1e-6)
    np.testing.assert_allclose(f["psnr_db"], 20 * np.log10(3.0 / np.sqrt(np.mean((out - ref) ** 2))), rtol=1e-6)
    np.testing.assert_allclose(f["max_abs_error"], 0.1, rtol=1e-6)


def test_sampled_rows_through_c():
    """vcattn_*_rows through ctypes: the listed rows of the full call, compact output."""
    rng = np.random.default_rng(7)
    H, Sq, Skv, D, n = 2, 300, 200, 64, 7
    q, k, v = (rng.standard_normal((1, H, s, D)).astype(np.float32) for s in (Sq, Skv, Skv))
    rows = np.zeros(n, dtype=np.int64)
    i64p = ctypes.POINTER(ctypes.c_int64)
    assert lib.vcattn_strided_rows(Sq, n, rows.ctypes.data_as(i64p)) == 0
    assert rows.tolist() == [i * Sq // n for i in range(n)]
    cfg = _lib.MethodConfig()
    assert lib.vcattn_method_config_get(1, ctypes.byref(cfg)) == 0  # sage2-8bit
    for simulate in (False, True):
        full = np.zeros((1, H, Sq, D), np.float32)
        part = np.full((1, H, n, D), np.nan, np.float32)
        outs = []
        for out, seq in ((full, Sq), (part, n)):
            p = _lib.AttentionParams()
            lib.vcattn_attention_params_init(ctypes.byref(p), 1, H, Sq, Skv, D, q.ctypes.data, k.ctypes.data,
                                             v.ctypes.data, out.ctypes.data)
            p.o_stride[0], p.o_stride[1] = H * seq * D, seq * D
            if out is full:
                st = (lib.vcattn_simulate_attention(ctypes.byref(p), ctypes.byref(cfg), None, None) if simulate
                      else lib.vcattn_reference_attention(ctypes.byref(p)))
            else:
                rp = rows.ctypes.data_as(i64p)
                st = (lib.vcattn_simulate_attention_rows(ctypes.byref(p), ctypes.byref(cfg), None, rp, n, None)
                      if simulate else lib.vcattn_reference_attention_rows(ctypes.byref(p), rp, n))
            assert st == 0
            outs.append(out)
        assert np.array_equal(part, full[:, :, rows]), "sampled rows differ from the full call's"
    bad = np.array([3, 3], dtype=np.int64)
    p = _lib.AttentionParams()
    o = np.zeros((1, H, 2, D), np.float32)
    lib.vcattn_attention_params_init(ctypes.byref(p), 1, H, Sq, Skv, D, q.ctypes.data, k.ctypes.data,
                                     v.ctypes.data, o.ctypes.data)
    p.o_stride[0], p.o_stride[1] = H * 2 * D, 2 * D
    assert lib.vcattn_reference_attention_rows(ctypes.byref(p), bad.ctypes.data_as(i64p), 2) == \
        _lib.STATUS_NAMES.index("INVALID_ARGUMENT")
