"""``orbitscope lee``: the Lie derivative (local equivariance error) of a model, per generator and
layer, stored as a run. Mounted on the main app by :mod:`orbitscope.cli.commands`."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, Optional

import typer

from .common import (HomeOption, InterpolationOption, PaddingOption, TrustOption, console, engine_progress,
                     parse_normalize, progress_bar)

__all__ = ["lee_command", "print_lee_rows", "print_lee_models"]


def print_lee_rows(rows: list[dict[str, Any]], shares: dict[str, dict[str, float]]) -> None:
    """The LEE table, then each generator's largest layer shares."""
    from rich.table import Table

    table = Table(title="local equivariance error (mean over samples, 95 % interval)")
    for col in ("generator", "unit", "n", "mean LEE", "interval", "median", "top layer"):
        table.add_column(col)
    for r in rows:
        top = f"{r['top_layer']} ({100 * r['top_layer_share']:.0f} %)" if r.get("top_layer") else "-"
        table.add_row(r["generator"], r["unit"], str(r["n"]), f"{r['mean_lee']:.4g}",
                      f"[{r['lee_lo']:.4g}, {r['lee_hi']:.4g}]", f"{r['median_lee']:.4g}", top)
    console.print(table)
    for g, layer_share in shares.items():
        if layer_share:
            best = sorted(layer_share.items(), key=lambda kv: -kv[1])[:5]
            console.print(f"{g}: " + ", ".join(f"{name} {100 * s:.1f} %" for name, s in best))


def print_lee_models(rows: list[dict[str, Any]]) -> None:
    """The demo's LEE rows (one per model and generator): mean with its interval, the top layer,
    and Spearman's ρ against the orbit spread with its interval."""
    from rich.table import Table

    table = Table(title="LEE (mean, 95 % interval) and its rank agreement with the orbit (Spearman ρ)")
    for col in ("model", "generator", "LEE", "interval", "top layer", "ρ vs orbit", "ρ interval"):
        table.add_column(col)
    for r in rows:
        rho = next((v for k, v in r.items() if k.startswith("spearman_vs")), None)
        rho = None if rho is None or rho != rho else rho  # NaN: not ranked (see orbitscope.demos.lee)
        top = f"{r['top_layer']} ({100 * r['top_layer_share']:.0f} %)" if r.get("top_layer") else "-"
        table.add_row(str(r["model"]), r["generator"], f"{r['mean_lee']:.3g}", f"[{r['lee_lo']:.3g}, {r['lee_hi']:.3g}]",
                      top, "-" if rho is None else f"{rho:.2f}",
                      "-" if rho is None else f"[{r['spearman_lo']:.2f}, {r['spearman_hi']:.2f}]")
    console.print(table)


def lee_command(
    model: str = typer.Option(..., "--model", help="'package.module:factory' (with --weights), a TorchScript, "
                              "torch.export or ONNX file, or an orbitscope .safetensors model file."),
    data: str = typer.Option(..., "--data", help="A data spec as for `orbitscope evaluate` ('@N' keeps the first N)."),
    generator: list[str] = typer.Option([], "--generator", "-g", help="rotation, translate_x, translate_y, scale, "
                                        "shear, brightness, contrast (images, frames), so3_x, so3_y, so3_z (point "
                                        "clouds); repeat it for several (default: every one that acts on the data)."),
    weights: Optional[Path] = typer.Option(None, "--weights", help="safetensors or state-dict file for a factory."),
    task_kind: str = typer.Option("classification", "--task", help="classification, detection, flow or pointcloud."),
    view_size: Optional[int] = typer.Option(None, "--view-size", help="Detection: the square field of view (pixels) "
                                            "at the centre of each context image."),
    home: Optional[Path] = HomeOption,
    name: Optional[str] = typer.Option(None, "--name", help="Run name (default: <model>-lee)."),
    batch_size: int = typer.Option(64, help="Samples per chunk (unit of storage and resumption)."),
    normalize: Optional[str] = typer.Option(None, help="Model input normalisation 'MEAN,…/STD,…'."),
    device: str = typer.Option("cpu", help="Device for the actions and the model, e.g. cpu or cuda."),
    layers: bool = typer.Option(True, "--layers/--no-layers", help="Also attribute LEE to every leaf module "
                                "(exactly: one forward-mode pass per module call)."),
    probes: Optional[int] = typer.Option(None, "--probes", help="Estimate the layer attribution from this many "
                                         "Gaussian probes instead (unbiased; cost independent of depth)."),
    method: str = typer.Option("jvp", help="jvp (forward-mode derivative through the model) or difference (a "
                               "symmetric difference of the whole model, for ONNX or models that detach inputs; "
                               "no layers)."),
    step: Optional[float] = typer.Option(None, help="Symmetric difference step in the generator's unit (default: "
                                         "the farthest pixel moves 1e-3 px)."),
    interpolation: str = InterpolationOption,
    padding: str = PaddingOption,
    out: Optional[Path] = typer.Option(None, "--out", help="Folder for lee.csv and the layer bar charts "
                                       "(lee_layers_<generator>.png)."),
    trust: bool = TrustOption,
    force: bool = typer.Option(False, help="Recompute even if a finished run with the same identity exists."),
) -> None:
    """The Lie derivative of a model along one-parameter groups (Gruver et al., ICLR 2023): LEE per
    sample, generator and layer, stored as a run (resumes if interrupted)."""
    from ..data.datasets import parse_data_spec
    from ..group.parse import parse_orbit
    from ..lie.run import lie_derivative
    from ..lie.summary import layer_shares, lee_rows
    from ..models.loading import load_user_model
    from ..results.store import Store
    from ..results.tables import write_csv
    from ..tasks.setup import task_and_data

    if method not in ("jvp", "difference"):
        raise ValueError(f"--method {method!r}: choose jvp or difference")
    dataset = parse_data_spec(data)
    orbit = parse_orbit("shift:0:0:1")  # the task's data only (detection contexts hold just the view)
    task, dataset, view = task_and_data(task_kind, dataset, orbit, view_size)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    net = load_user_model(model, weights, trust=trust)
    store = Store(home)
    with progress_bar() as bar:
        t0 = time.perf_counter()
        run = lie_derivative(net, dataset, generator or None, task, store=store, name=name,
                             model_name=Path(model).stem if Path(model).is_file() else model.split(":")[-1],
                             batch_size=batch_size, device=device, normalize=parse_normalize(normalize),
                             interpolation=interpolation, padding=padding, view_size=view,
                             layers=("probes" if probes else True) if layers and method == "jvp" else False,
                             probes=probes or 64, method=method, step=step,  # type: ignore[arg-type]
                             resume=not force, progress=engine_progress(bar, f"{len(dataset)} samples"))
        elapsed = time.perf_counter() - t0
    console.print(f"run [bold]{run.run_id}[/] {'(reused from the store)' if run.reused else f'done in {elapsed:.1f} s'} "
                  f"→ {store.home}")
    rows = lee_rows(run.result)
    shares = {r["generator"]: layer_shares(run.result, r["generator"]) for r in rows}
    print_lee_rows(rows, shares)
    if out is not None:
        from ..viz.lee_plots import lee_layer_figure
        from ..viz.plot import save_figure

        written = [write_csv(rows, out / "lee.csv")]
        if "layer_lee" in run.result.data:
            written += [save_figure(lee_layer_figure([run.result], r["generator"]), out / f"lee_layers_{r['generator']}.png")
                        for r in rows]
        console.print("wrote " + ", ".join(str(p) for p in written))
