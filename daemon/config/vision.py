"""Which models tether sends images to.

In order, first answer wins: the model's own `[models."NAME"] images`, then `[provider]
images`, then what tether knows. Anthropic's models all take images (every Claude since 3).
Of an OpenAI-compatible server's, those whose name is a known vision model's do: OpenAI's
GPT-4o, 4.1, 4.5 and 5 families, o1/o3/o4 (not the minis of o1 and o3), and the open vision
models local servers serve (LLaVA, Llama 3.2 Vision and Llama 4, Qwen-VL, Gemma 3 from 4B,
Pixtral, Mistral Small 3.1+, MiniCPM-V, Moondream, Granite Vision, InternVL, and any name
with `vision` or `-vl` in it). Anything else does not, so a text-only model gets a clear
error before the call rather than a 400 after it; `images = true` corrects a wrong guess.
"""

import re
from collections.abc import Mapping

from tether.daemon.config.settings import ModelConfig, ProviderConfig

_OPENAI_VISION = re.compile(
    r"""
    (?:^|[/:])(?:
        gpt-4o | gpt-4\.1 | gpt-4\.5 | gpt-4-turbo | gpt-4-vision | gpt-5 | chatgpt-4o
      | o1(?!-mini) | o3(?!-mini) | o4
      | llava | bakllava | llama3\.2-vision | llama-3\.2-\d+b-vision | llama-?4
      | qwen[\d.]*-?vl | qvq
      | gemma-?3(?![:-]1b)(?!n) | gemma-?3n
      | pixtral | mistral-small-?3\.[1-9] | mistral-medium-?3 | minicpm-v | moondream
      | granite[\d.]*-vision | internvl | glm-4\.?\dv | kimi-vl
    )
    | vision | -vl\b
    """,
    re.IGNORECASE | re.VERBOSE,
)


def takes_images(provider: ProviderConfig, models: Mapping[str, ModelConfig], model: str) -> bool:
    """Whether turns calling `model` on `provider` may send it images (module docstring)."""
    chosen = models.get(model)
    if chosen is not None and chosen.images is not None:
        return chosen.images
    if provider.images is not None:
        return provider.images
    if provider.kind == "anthropic":
        return True
    return _OPENAI_VISION.search(model) is not None
