"""Sparse factorization paper, Table 1 / Fig. 4: TSVD vs non-parametric SF on real matrices.

Matrices available offline: scikit-image's bundled sample images (grey,
centre-cropped and resized to N×N, in [0, 1]) and their Sobel gradient
magnitudes; adjacency matrices of the graphs bundled with networkx (the
"network" type); covariance matrices of scikit-learn's bundled datasets. For
each, SF (:func:`kctx.sf.fit`) and TSVD at :func:`kctx.sf.matched_rank` (no
fewer non-zeros than SF) are compared by the F-norm error ‖X − X̂‖_F.
"""

from kctx.arguments import output_path, positive_int
from kctx.bench import report

IMAGES = ("checkerboard", "camera", "astronaut", "coins", "moon", "text", "brick", "grass",
          "gravel", "horse")
GRAPHS = ("karate_club_graph", "davis_southern_women_graph", "florentine_families_graph",
          "les_miserables_graph")
COVARIANCES = ("digits", "breast_cancer", "wine", "diabetes")


def _image(name, size):
    import numpy as np
    import skimage.data
    import skimage.transform

    image = np.asarray(getattr(skimage.data, name)(), np.float64)
    if image.ndim == 3:
        image = image[..., :3] @ np.array([0.2125, 0.7154, 0.0721])
    image = image / max(image.max(), 1e-12)
    side = min(image.shape)
    top, left = (image.shape[0] - side) // 2, (image.shape[1] - side) // 2
    image = image[top:top + side, left:left + side]
    return skimage.transform.resize(image, (size, size), anti_aliasing=True)


def matrices(size=256, kinds=("image", "gradient", "network", "covariance")):
    """(kind, name, matrix) triples; images and gradients are size×size."""
    import numpy as np

    out = []
    for name in IMAGES:
        image = _image(name, size)
        if "image" in kinds:
            out.append(("image", name, image))
        if "gradient" in kinds:
            import skimage.filters

            out.append(("gradient", f"{name} (gradient)", skimage.filters.sobel(image)))
    if "network" in kinds:
        import networkx

        for name in GRAPHS:
            graph = getattr(networkx, name)()
            out.append(("network", name.replace("_graph", ""),
                        networkx.to_numpy_array(graph, weight="weight")))
    if "covariance" in kinds:
        import sklearn.datasets

        for name in COVARIANCES:
            data = getattr(sklearn.datasets, f"load_{name}")().data
            out.append(("covariance", name, np.cov(np.asarray(data, np.float64), rowvar=False)))
    return out


def run_sf_approx(size=256, steps=1000, kinds=("image", "gradient", "network", "covariance"),
                  log=print):
    import time

    from kctx import sf

    rows = []
    for kind, name, matrix in matrices(size, kinds):
        n = matrix.shape[0]
        log(f"fitting {name} ({n}×{n}) ...")
        start = time.perf_counter()
        fitted = sf.fit(matrix, steps=steps)
        seconds = time.perf_counter() - start
        rank = sf.matched_rank(n)
        _, tsvd_error = sf.tsvd(matrix, rank)
        rows.append({"kind": kind, "name": name, "n": n, "tsvd_rank": rank,
                     "tsvd_nonzeros": 2 * n * rank + rank, "sf_nonzeros": fitted.nonzeros,
                     "tsvd_error": tsvd_error, "sf_error": fitted.error,
                     "winner": "SF" if fitted.error < tsvd_error else "TSVD",
                     "sf_seconds": round(seconds, 1), "sf_iterations": len(fitted.losses)})
    return rows


def format_table(rows):
    header = (f"{'Kind':<11} {'Matrix':<28} {'N':>5} {'r':>4} {'nnz TSVD':>9} {'nnz SF':>8} "
              f"{'TSVD error':>11} {'SF error':>11}  Winner")
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(f"{r['kind']:<11} {r['name']:<28} {r['n']:>5} {r['tsvd_rank']:>4} "
                     f"{r['tsvd_nonzeros']:>9,} {r['sf_nonzeros']:>8,} {r['tsvd_error']:>11.3e} "
                     f"{r['sf_error']:>11.3e}  {r['winner']}")
    wins = {kind: [r["winner"] for r in rows if r["kind"] == kind]
            for kind in dict.fromkeys(r["kind"] for r in rows)}
    lines.append("")
    lines.append("F-norm errors; SF: chord factors fitted with L-BFGS; TSVD rank r with "
                 "2Nr + r ≥ SF's non-zeros. SF wins per kind: " + ", ".join(
                     f"{kind} {w.count('SF')}/{len(w)}" for kind, w in wins.items()))
    return "\n".join(lines)


def main(args):
    rows = run_sf_approx(size=args.size, steps=args.steps, kinds=tuple(args.kinds))
    return report(rows, format_table(rows), args.json)


def add_arguments(parser):
    parser.add_argument("--size", type=positive_int, default=256, help="side of the image matrices")
    parser.add_argument("--steps", type=positive_int, default=1000,
                        help="L-BFGS iterations per matrix")
    kinds = ["image", "gradient", "network", "covariance"]
    parser.add_argument("--kinds", nargs="+", default=kinds, choices=kinds)
    parser.add_argument("--json", type=output_path,
                        help="write the rows as a JSON list to this path")
