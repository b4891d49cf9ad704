#!/usr/bin/python3
"""bench_rigapprox_torch.py — the PyTorch side of `make bench-rigapprox`.

Runs the same rigapprox chain as core/rigapprox/kind_rigapprox.c (dense-folded
reconstruction) on the same weights, on one thread (torch.set_num_threads(1),
the daemon's OpenBLAS setting), written as a PyTorch user would batch it:
features (Eq. 9; local joint matrices when the model has joint_parents, the
parent inverses in closed form) -> differential MLP -> PCA
coefficients (plus the linear path when the model has one); the anchor mini-networks; v_nl = g0 + z G^T + (H AP)^T; LBS with
T_i = sum_k w_ik world_k invbind_k as one matmul by the dense [V,J] weights.
G, H, g0 and the bench poses come from bench_rigapprox --dump (computed by our
CHOLMOD factor), the networks from the model file itself. Rates: the best of 5
rounds, as on the C side.

The anchor bank is run as a PyTorch user would batch many small networks:
each network's inputs gathered into one tensor padded to the widest input
(the padding reads a zero column and meets zero weights, so the answer is
unchanged), then one batched matrix product (torch.baddbmm) per layer for
all networks at once. The per-network Python loop is also timed, for
reference (TORCH_LOOP_B<b>).

usage: bench_rigapprox_torch.py MODEL.safetensors FOLDED.safetensors
Prints "TORCH_B<b> <poses/s>" (batched anchors) and "TORCH_LOOP_B<b>" lines,
and the max difference between each one's positions and the served answer
(df_model_evaluate) for bench pose 0.
"""
import json
import struct
import sys
import time

import numpy as np
import torch


def read_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    meta = h.pop("__metadata__", {})
    out = {}
    for k, v in h.items():
        s, e = v["data_offsets"]
        dt = {"F32": np.float32, "I32": np.int32, "F64": np.float64}[v["dtype"]]
        out[k] = np.frombuffer(b[8 + n + s:8 + n + e], dtype=dt).reshape(v["shape"]).copy()
    return out, meta


def main():
    torch.set_num_threads(1)
    m, meta = read_st(sys.argv[1])
    f, _ = read_st(sys.argv[2])
    t = {k: torch.from_numpy(v) for k, v in m.items()}
    G, H, g0 = (torch.from_numpy(f[k]) for k in ("G", "H", "g0"))
    world_all = torch.from_numpy(f["bench_world"])  # [16*J, 12]
    V = m["rest_positions"].shape[0]
    J = m["inverse_bind_matrices"].shape[0]
    C = m["control_ranges"].shape[0] if "control_ranges" in m else 0
    nl = int(meta["net_layers"])
    al = int(meta["anchor_layers"])
    net = [(t["net/%d/weight" % i], t["net/%d/bias" % i]) for i in range(nl)]
    lin = (t["net_linear/weight"], t["net_linear/bias"]) if "net_linear/weight" in t else None
    alin = (t["anchor_linear/weight"], t["anchor_linear/bias"]) if "anchor_linear/weight" in t else None
    A = m["anchor_vertices"].shape[0]
    off = m["anchor_input_offsets"]
    idx = [torch.from_numpy(m["anchor_input_index"][off[a]:off[a + 1]].astype(np.int64)) for a in range(A)]
    anets = [[(t["anchor/%d/%d/weight" % (a, i)], t["anchor/%d/%d/bias" % (a, i)]) for i in range(al)]
             for a in range(A)]
    fm, fs = t["feature_mean"], t["feature_scale"]
    ib = t["inverse_bind_matrices"].reshape(J, 3, 4)
    ib4 = torch.cat([ib, torch.tensor([0, 0, 0, 1.0]).expand(J, 1, 4)], 1)
    # skin weights as a dense [V,J] matrix: the linear part is one matmul for the batch
    Wd = torch.zeros(V, J)
    Wd.index_put_((torch.arange(V)[:, None].expand(-1, m["skin_joints"].shape[1]),
                   torch.from_numpy(m["skin_joints"].astype(np.int64))), t["skin_weights"], accumulate=True)
    rest = t["rest_positions"]

    def mlp(layers, x):
        for i, (w, b) in enumerate(layers):
            x = torch.nn.functional.linear(x, w, b)
            if i < len(layers) - 1:
                x = torch.relu(x)
        return x

    # local joint features (format_version 2): world_p^-1 world_j, roots world
    par = m["joint_parents"].astype(np.int64) if "joint_parents" in m else None
    if par is not None:
        has_p = torch.from_numpy(par >= 0)
        pidx = torch.from_numpy(np.where(par >= 0, par, np.arange(J)))

    def features(world):  # [B,J,12] -> [B,12J]
        B = world.shape[0]
        if par is None:
            return world.reshape(B, -1)
        w = world.reshape(B, J, 3, 4)
        # parent^-1 in closed form (3x3 adjugate / determinant; batched torch.linalg.inv
        # of many 4x4 matrices is far slower on the CPU)
        P = w[:, pidx]
        r0, r1, r2 = P[..., 0, :3], P[..., 1, :3], P[..., 2, :3]
        c0, c1, c2 = torch.cross(r1, r2, dim=-1), torch.cross(r2, r0, dim=-1), torch.cross(r0, r1, dim=-1)
        det = (r0 * c0).sum(-1, keepdim=True)[..., None]
        Ri = torch.stack([c0, c1, c2], -1) / det  # [B,J,3,3]
        Rl = Ri @ w[..., :3]
        tl = Ri @ (w[..., 3:] - P[..., 3:])
        loc = torch.cat([Rl, tl], -1)
        loc = torch.where(has_p[None, :, None, None], loc, w)
        return loc.reshape(B, -1)

    # the anchor bank as batched tensors: inputs padded to the widest, weights [A, out, in]
    F = fm.shape[0]
    nmax = max(len(i) for i in idx)
    idx_pad = torch.full((A, nmax), F, dtype=torch.int64)  # F: a zero column appended to x
    W0 = torch.zeros(A, anets[0][0][0].shape[0], nmax)
    for a in range(A):
        idx_pad[a, :len(idx[a])] = idx[a]
        W0[a, :, :len(idx[a])] = anets[a][0][0]
    bW = [W0.transpose(1, 2).contiguous()] + \
         [torch.stack([anets[a][i][0] for a in range(A)]).transpose(1, 2).contiguous() for i in range(1, al)]
    bB = [torch.stack([anets[a][i][1] for a in range(A)])[:, None, :] for i in range(al)]  # [A,1,out]

    def anchors_batched(x):  # [B,F] -> [A,B,3]
        B = x.shape[0]
        h = torch.cat([x, torch.zeros(B, 1)], 1)[:, idx_pad].transpose(0, 1)  # [A,B,nmax]
        for i in range(al):
            h = torch.baddbmm(bB[i], h, bW[i])
            if i < al - 1:
                h = torch.relu(h)
        return h

    def anchors_loop(x):
        return torch.stack([mlp(anets[a], x.index_select(1, idx[a])) for a in range(A)], 0)  # [A,B,3]

    anchors = anchors_batched

    def forward(world, ctl):  # world [B,J,12], ctl [B,C]
        B = world.shape[0]
        x = torch.cat([features(world), ctl], 1)
        x = (x - fm) * fs
        z = mlp(net, x)
        if lin is not None:  # the linear path beside the network
            z = z + torch.nn.functional.linear(x, lin[0], lin[1])
        ap = anchors(x)  # [A,B,3]
        if alin is not None:  # the anchors' linear path
            ap = ap + torch.nn.functional.linear(x, alin[0], alin[1]).reshape(B, A, 3).transpose(0, 1)
        vnl = g0 + z @ G.t()  # [B,3V]
        vnl = vnl + (H @ ap.reshape(A, 3 * B)).reshape(V, B, 3).permute(1, 0, 2).reshape(B, 3 * V)
        skm = (world.reshape(B, J, 3, 4) @ ib4).reshape(B, J, 12)  # [B,J,12]
        T = torch.matmul(Wd, skm).reshape(B, V, 3, 4)  # [B,V,3,4]
        p = rest[None] + vnl.reshape(B, V, 3)
        return torch.einsum("bvij,bvj->bvi", T[..., :3], p) + T[..., 3]

    ctl1 = torch.zeros(C)
    h = float((m["rest_positions"].max(0) - m["rest_positions"].min(0)).max())
    with torch.no_grad():
        for name, fn in (("TORCH", anchors_batched), ("TORCH_LOOP", anchors_loop)):
            anchors = fn
            for B in (1, 8, 32, 128):
                world = world_all.reshape(16, J, 12)[torch.arange(B) % 16]
                ctl = ctl1.expand(B, C).contiguous()
                forward(world, ctl)
                best = 0.0
                for _ in range(5):  # best of 5 rounds of 0.2 s, as bench_rigapprox.c
                    reps, t0 = 0, time.perf_counter()
                    while True:
                        forward(world, ctl)
                        reps += 1
                        el = time.perf_counter() - t0
                        if el > 0.2 and reps >= 2:
                            break
                    best = max(best, reps * B / el)
                print("%s_B%d %.1f" % (name, B, best))
            if "pose0_positions" in f:
                out = forward(world_all.reshape(16, J, 12)[:1], ctl1[None]).numpy().reshape(V, 3)
                d = float(np.abs(out - f["pose0_positions"]).max())
                print("same answer (%s): max |torch - ours| = %.3g (%.2g of height)" % (
                    "anchors batched" if fn is anchors_batched else "anchors one by one", d, d / h))
                if not d <= 1e-4 * h:
                    sys.exit("bench_rigapprox_torch.py: PyTorch's answer differs from the served one")


if __name__ == "__main__":
    main()
