"""Time and peak memory of each local image engine, on a small and a large input.

    python bench/engines_images.py [--repeat 3] [--json bench/results/engines_images.json]

Each (engine, input) runs in a fresh spawned process, as a pool worker would: the first
call's time includes loading the model or cascade (cold), the best of the next
``--repeat`` calls is the warm time, and the peak is the process's maximum resident set
size (Python, numpy, OpenCV and onnxruntime included). One thread per process, as in
the pool (satsgate.engines.local.image_ops). The warm call's CPU time is given beside
its wall time: on a shared machine the wall time moves with the load, the CPU time less.

Inputs: a photo-like image (smooth gradients, shapes, texture and the astronaut photo
where scikit-image is installed) at 512x512 (small) and 4096x4096 (large: the services'
pixel cap); upscale-image goes 256x256 -> 4x (small) and 2048x2048 -> 2x (large, the
4096x4096 output cap). JPEG inputs, as photos come.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import multiprocessing
import platform
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

SIZES = {"small": 512, "large": 4096}
UPSCALE = {"small": (256, 4), "large": (2048, 2)}


def photo(side: int) -> Image.Image:
    """Something like a photo: gradients, shapes, fine texture, a face where available."""
    yy, xx = np.mgrid[0:side, 0:side].astype(np.float32) / side
    base = np.dstack([180 * xx + 40, 160 * yy + 50, 120 * (1 - xx) * yy + 60])
    texture = np.random.default_rng(1).normal(0, 6, (side, side, 3))
    img = Image.fromarray(np.clip(base + texture, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(img)
    for i in range(12):
        x, y, r = (i * 97) % side, (i * 193) % side, side // (8 + i)
        draw.ellipse((x, y, x + r, y + r), fill=(30 * i % 255, 90, 200 - 10 * i))
    spec = importlib.util.find_spec("skimage")
    if spec is not None and spec.submodule_search_locations:
        face = Path(next(iter(spec.submodule_search_locations))) / "data" / "astronaut.png"
        with Image.open(face) as astronaut:
            img.paste(astronaut.convert("RGB").resize((side // 2, side // 2)), (side // 4,) * 2)
    return img


def jpeg(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90)
    return buf.getvalue()


def job(engine: str, size: str) -> tuple[Any, ...]:
    """(function name in image_ops, args) for one measurement."""
    if engine == "upscale_image":
        side, scale = UPSCALE[size]
        return ("upscale", jpeg(photo(side)), scale)
    data = jpeg(photo(SIZES[size]))
    if engine == "detect_nsfw":
        return ("classify_nsfw", data)
    if engine == "detect_objects":
        return ("detect_haar", data, ("face", "eye"), 0.3)
    if engine in ("deblur_image", "denoise_image"):
        side = SIZES[size]
        img = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), np.float32)
        noisy = img + np.random.default_rng(2).normal(0, 12, img.shape)
        degraded = jpeg(Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)))
        mode = "deblur" if engine == "deblur_image" else "denoise"
        if mode == "deblur":
            blurred = Image.open(io.BytesIO(data)).resize((side // 2,) * 2).resize((side,) * 2)
            degraded = jpeg(blurred)
        return ("deblur", degraded, mode)
    if engine == "remove_object":
        side = SIZES[size]
        mask = Image.new("L", (side, side), 0)
        ImageDraw.Draw(mask).rectangle((side // 3, side // 3, side // 2, side // 2), fill=255)
        buf = io.BytesIO()
        mask.save(buf, "PNG")
        return ("inpaint", data, buf.getvalue(), "telea")
    raise ValueError(engine)


def peak_rss_kb() -> int:
    """This process's peak resident set (VmHWM): unlike ru_maxrss, which keeps the
    parent's peak across fork and exec, it starts afresh in a spawned process."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def measure(engine: str, size: str, work: tuple[Any, ...], repeat: int, out: Any) -> None:
    """In a fresh process: cold call, warm calls, peak RSS (the input is made by the
    parent, so its making does not count)."""
    from satsgate.engines.local import image_ops

    name, *args = work
    base_rss = peak_rss_kb()
    fn = getattr(image_ops, name)
    started = time.perf_counter()
    result = fn(*args)
    cold = time.perf_counter() - started
    times, cpu_times = [], []
    for _ in range(max(1, repeat)):
        t0, c0 = time.perf_counter(), time.process_time()
        fn(*args)
        times.append(time.perf_counter() - t0)
        cpu_times.append(time.process_time() - c0)
    warm = min(times)
    peak = peak_rss_kb()
    info: dict[str, Any] = {
        "engine": engine,
        "size": size,
        "cold_s": round(cold, 3),
        "warm_s": round(warm, 3),
        "warm_cpu_s": round(min(cpu_times), 3),
        "peak_rss_mb": round(peak / 1024, 1),
        "start_rss_mb": round(base_rss / 1024, 1),
        "input_bytes": len(args[0]),
    }
    data = getattr(result, "data", None)
    if data is not None:
        info.update(
            output_bytes=len(data), output=f"{result.width}x{result.height}", method=result.method
        )
    else:
        info["method"] = result.method
    out.put(info)


ENGINES = (
    "detect_nsfw",
    "detect_objects",
    "upscale_image",
    "deblur_image",
    "denoise_image",
    "remove_object",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--engine", action="append", choices=ENGINES)
    args = parser.parse_args()
    ctx = multiprocessing.get_context("spawn")
    rows = []
    for engine in args.engine or ENGINES:
        for size in SIZES:
            queue = ctx.Queue()
            work = job(engine, size)
            proc = ctx.Process(target=measure, args=(engine, size, work, args.repeat, queue))
            proc.start()
            rows.append(queue.get(timeout=900))
            proc.join()
            row = rows[-1]
            print(
                f"{engine:15} {size:5} cold {row['cold_s']:7.3f} s  warm {row['warm_s']:7.3f} s"
                f" (CPU {row['warm_cpu_s']:7.3f} s)"
                f"  peak RSS {row['peak_rss_mb']:7.1f} MB  {row.get('output', '')}",
                flush=True,
            )
    print()
    print(
        "| engine | input | cold s | warm s | warm CPU s | peak RSS MB (at start) | output "
        "(bytes) |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        side = (
            f"{UPSCALE[row['size']][0]}px x{UPSCALE[row['size']][1]}"
            if row["engine"] == "upscale_image"
            else f"{SIZES[row['size']]}px"
        )
        output = f"{row.get('output', '-')} {row.get('output_bytes', '')}".strip()
        print(
            f"| {row['engine']} | {side} JPEG | {row['cold_s']} | {row['warm_s']} | "
            f"{row['warm_cpu_s']} | "
            f"{row['peak_rss_mb']} ({row['start_rss_mb']}) | {output} |"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {"machine": platform.platform(), "cpus": multiprocessing.cpu_count(), "rows": rows},
                indent=2,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
