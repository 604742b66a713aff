"""Preparing an image for the model: what `turn/start` costs the daemon per attached image.

Writes four images (in a temporary folder, removed afterwards) and, in a fresh child process
each run, times `prepare_image` on each for Anthropic's limits:

  screenshot    a 1280x720 PNG within the limits: sent byte for byte, Pillow not imported
  4k png        a 3840x2160 PNG screenshot: decoded, downscaled to 1568 px, written as PNG
  photo         a 4032x3024 JPEG (a phone's): downscaled, written as JPEG
  noise         a 1500x1200 PNG that stays too large as PNG: written as JPEG instead

and Pillow's import, which the first image over the limits pays. The work runs in a worker
thread, off the event loop: the numbers are a turn/start's added latency, not a stall.

Target: screenshot < 1 ms (most images need nothing); the rest is reported.

Usage: python bench/images.py [--runs N]
Takes a few seconds.
"""

import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _harness import load_line, machine_line, median, ms, row, runs_argument, verdict

PASSTHROUGH_TARGET = 0.001

CHILD = r"""
import json, sys, time
from pathlib import Path
from tether.daemon.context.images import prepare_image

root = Path(sys.argv[1])
result = {}
for name in ("screenshot", "4k png", "photo", "noise"):
    data = (root / name).read_bytes()
    if name == "4k png":
        start = time.perf_counter(); import PIL.Image
        result["import"] = time.perf_counter() - start
    start = time.perf_counter(); prepared = prepare_image(name, data, "anthropic")
    result[name] = time.perf_counter() - start
    result[name + " bytes"] = [len(data), prepared.ref.size]
print(json.dumps(result))
"""


def write_images(root: Path) -> None:
    from PIL import Image

    def save(name: str, picture: Image.Image, fmt: str, **options: object) -> None:
        out = io.BytesIO()
        picture.save(out, fmt, **options)
        (root / name).write_bytes(out.getvalue())

    def gradient(width: int, height: int) -> Image.Image:
        return Image.linear_gradient("L").resize((width, height)).convert("RGB")

    save("screenshot", gradient(1280, 720), "PNG")
    save("4k png", gradient(3840, 2160), "PNG")
    photo = Image.effect_noise((4032, 3024), 40).convert("RGB")
    save("photo", photo, "JPEG", quality=90)
    noise = Image.frombytes("RGB", (1500, 1200), os.urandom(1500 * 1200 * 3))
    save("noise", noise, "PNG")


def main() -> None:
    runs = runs_argument(__doc__, 5)
    print(f"images ({machine_line()}; {load_line()})")
    readings: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="tether-bench-images-") as temp:
        root = Path(temp)
        write_images(root)
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        for _ in range(runs):
            done = subprocess.run(
                [sys.executable, "-c", CHILD, str(root)],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            readings.append(json.loads(done.stdout))

    def med(key: str) -> float:
        return median([reading[key] for reading in readings])

    def sizes(key: str) -> str:
        before, after = readings[0][key + " bytes"]  # type: ignore[misc]
        return f"{before / 1024:,.0f} KB -> {after / 1024:,.0f} KB"

    passthrough = med("screenshot")
    row(
        "1280x720 PNG, within the limits",
        ms(passthrough),
        f"< {ms(PASSTHROUGH_TARGET)}",
        verdict(passthrough, PASSTHROUGH_TARGET),
    )
    row("import Pillow", ms(med("import")))
    row("3840x2160 PNG, downscaled", ms(med("4k png")), note=sizes("4k png"))
    row("4032x3024 JPEG photo, downscaled", ms(med("photo")), note=sizes("photo"))
    row("1500x1200 noise PNG, as JPEG", ms(med("noise")), note=sizes("noise"))


if __name__ == "__main__":
    main()
