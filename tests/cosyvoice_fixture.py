"""Build a tiny random-weight CosyVoice-300M model directory for tests and benchmarks.

Real CosyVoice weights are gigabytes and cannot be downloaded here, yet the engine must be
tested against the real CosyVoice code (config parsing, the frontend, the LLM, the flow
decoder, the vocoder, the speaker table). So this script writes a model directory in the
exact CosyVoice-300M *format*, with every network shrunk to a few kilobytes and random
weights: the real classes load it and run every mode, and the audio is noise.

Regenerate (about 5 s, about 4.5 MB; needs the CosyVoice stack, see
``tests/install_cosyvoice.sh``)::

    python tests/cosyvoice_fixture.py OUTDIR            # -> OUTDIR/CosyVoice-300M-tiny
    python tests/cosyvoice_fixture.py OUTDIR --instruct # -> OUTDIR/CosyVoice-300M-Instruct-tiny

The tests call :func:`build` into a session temporary directory, so nothing is committed.
The output is a pure function of ``seed``: building twice gives byte-identical weights
(torch.save of the same tensors), which the model-version tests rely on.

What is fixed by the CosyVoice code and kept at real size: 22,050 Hz output, 80 mel bins,
192-d speaker embeddings, the 128-bin whisper mel the speech tokenizer reads, and
HiFT upsampling x iSTFT hop = 256 samples per mel frame. Everything else is shrunk:
transformer width 16 with one block, 64 speech tokens, flow channels [16], HiFT base
channels 16. The two ONNX files are stand-ins with the real models' input and output
shapes: the speaker model maps (1, T, 80) fbank to a (1, 192) embedding; the speech
tokenizer maps a (1, 128, T) whisper mel plus its length to (1, T/2) token ids (50 Hz).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import Any

_LOGGER = logging.getLogger(__name__)

__all__ = ["PRESET_SPEAKERS", "SPEECH_TOKEN_SIZE", "build", "export_onnx", "prompt_pcm", "speaker_model"]

#: Speakers written to spk2info.pt (preset voices of the fixture).
PRESET_SPEAKERS = ("preset-a", "preset-b")
#: Size of the fixture's speech-token vocabulary (the real model has 4096).
SPEECH_TOKEN_SIZE = 64

_WIDTH = 16

_YAML = """\
# Tiny random-weight CosyVoice-300M (test fixture, built by tests/cosyvoice_fixture.py).
# Same structure as the released cosyvoice.yaml, inference sections only, shrunk.
sample_rate: 22050
text_encoder_input_size: {w}
llm_input_size: {w}
llm_output_size: {w}
spk_embed_dim: 192

llm: !new:cosyvoice.llm.llm.TransformerLM
    text_encoder_input_size: !ref <text_encoder_input_size>
    llm_input_size: !ref <llm_input_size>
    llm_output_size: !ref <llm_output_size>
    text_token_size: {text_tokens}
    speech_token_size: {speech_tokens}
    length_normalized_loss: True
    lsm_weight: 0
    spk_embed_dim: !ref <spk_embed_dim>
    text_encoder: !new:cosyvoice.transformer.encoder.ConformerEncoder
        input_size: !ref <text_encoder_input_size>
        output_size: {w}
        attention_heads: 2
        linear_units: {units}
        num_blocks: 1
        dropout_rate: 0.1
        positional_dropout_rate: 0.1
        attention_dropout_rate: 0.0
        normalize_before: True
        input_layer: 'linear'
        pos_enc_layer_type: 'rel_pos_espnet'
        selfattention_layer_type: 'rel_selfattn'
        use_cnn_module: False
        macaron_style: False
        use_dynamic_chunk: False
        use_dynamic_left_chunk: False
        static_chunk_size: 1
    llm: !new:cosyvoice.transformer.encoder.TransformerEncoder
        input_size: !ref <llm_input_size>
        output_size: !ref <llm_output_size>
        attention_heads: 2
        linear_units: {units}
        num_blocks: 1
        dropout_rate: 0.1
        positional_dropout_rate: 0.1
        attention_dropout_rate: 0.0
        input_layer: 'linear_legacy'
        pos_enc_layer_type: 'rel_pos_espnet'
        selfattention_layer_type: 'rel_selfattn'
        static_chunk_size: 1
    sampling: !name:cosyvoice.utils.common.ras_sampling
        top_p: 0.8
        top_k: 25
        win_size: 10
        tau_r: 0.1

flow: !new:cosyvoice.flow.flow.MaskedDiffWithXvec
    input_size: {w}
    output_size: 80
    spk_embed_dim: !ref <spk_embed_dim>
    output_type: 'mel'
    vocab_size: {speech_tokens}
    input_frame_rate: 50
    only_mask_loss: True
    encoder: !new:cosyvoice.transformer.encoder.ConformerEncoder
        output_size: {w}
        attention_heads: 2
        linear_units: {units}
        num_blocks: 1
        dropout_rate: 0.1
        positional_dropout_rate: 0.1
        attention_dropout_rate: 0.1
        normalize_before: True
        input_layer: 'linear'
        pos_enc_layer_type: 'rel_pos_espnet'
        selfattention_layer_type: 'rel_selfattn'
        input_size: {w}
        use_cnn_module: False
        macaron_style: False
    length_regulator: !new:cosyvoice.flow.length_regulator.InterpolateRegulator
        channels: 80
        sampling_ratios: [1]
    decoder: !new:cosyvoice.flow.flow_matching.ConditionalCFM
        in_channels: 240
        n_spks: 1
        spk_emb_dim: 80
        cfm_params: !new:omegaconf.DictConfig
            content:
                sigma_min: 1e-06
                solver: 'euler'
                t_scheduler: 'cosine'
                training_cfg_rate: 0.2
                inference_cfg_rate: 0.7
                reg_loss_type: 'l1'
        estimator: !new:cosyvoice.flow.decoder.ConditionalDecoder
            in_channels: 320
            out_channels: 80
            channels: [{w}]
            dropout: 0.0
            attention_head_dim: 8
            n_blocks: 1
            num_mid_blocks: 1
            num_heads: 2
            act_fn: 'gelu'

hift: !new:cosyvoice.hifigan.generator.HiFTGenerator
    in_channels: 80
    base_channels: {w}
    nb_harmonics: 8
    sampling_rate: !ref <sample_rate>
    nsf_alpha: 0.1
    nsf_sigma: 0.003
    nsf_voiced_threshold: 10
    upsample_rates: [8, 8]
    upsample_kernel_sizes: [16, 16]
    istft_params:
        n_fft: 16
        hop_len: 4
    resblock_kernel_sizes: [3]
    resblock_dilation_sizes: [[1, 3]]
    source_resblock_kernel_sizes: [7, 11]
    source_resblock_dilation_sizes: [[1, 3], [1, 3]]
    lrelu_slope: 0.1
    audio_limit: 0.99
    f0_predictor: !new:cosyvoice.hifigan.f0_predictor.ConvRNNF0Predictor
        num_class: 1
        in_channels: 80
        cond_channels: {w}

get_tokenizer: !name:cosyvoice.tokenizer.tokenizer.get_tokenizer
    multilingual: True
    num_languages: 100
    language: 'en'
    task: 'transcribe'
allowed_special: 'all'
feat_extractor: !name:matcha.utils.audio.mel_spectrogram
    n_fft: 1024
    num_mels: 80
    sampling_rate: !ref <sample_rate>
    hop_size: 256
    win_size: 1024
    fmin: 0
    fmax: 8000
    center: False
"""


def _text_token_count() -> int:
    """Vocabulary size of the tokenizer the yaml names (the text embedding needs it)."""
    from cosyvoice.tokenizer.tokenizer import get_tokenizer

    tokenizer = get_tokenizer(multilingual=True, num_languages=100, language="en", task="transcribe")
    return int(tokenizer.encoding.n_vocab)


def export_onnx(
    module: Any,
    args: tuple[Any, ...],
    path: Path,
    names: list[str],
    outputs: list[str],
    axes: dict[str, dict[int, str]],
) -> None:
    import torch

    module.eval()
    # The legacy (TorchScript) exporter: it needs no onnxscript and gives a small, stable file.
    torch.onnx.export(
        module,
        args,
        str(path),
        input_names=names,
        output_names=outputs,
        dynamic_axes=axes,
        opset_version=17,
        dynamo=False,
    )


def speaker_model() -> Any:
    """Stand-in for campplus.onnx: (1, T, 80) fbank -> (1, 192) embedding."""
    import torch

    class Speaker(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(80, 192)

        def forward(self, feats: torch.Tensor) -> torch.Tensor:
            return torch.tanh(self.proj(feats.mean(dim=1)))

    return Speaker()


def prompt_pcm(seconds: float = 3.0, seed: int = 0) -> Any:
    """Deterministic voiced-sounding int16 PCM at 16 kHz (harmonics, vibrato, syllables)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    t = np.arange(int(16_000 * seconds)) / 16_000
    f0 = 140 + 20 * np.sin(2 * np.pi * 0.7 * t) + 10 * seed
    phase = 2 * np.pi * np.cumsum(f0) / 16_000
    voiced = sum(np.sin(k * phase) / k for k in range(1, 8))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 3.1 * t) ** 2
    audio = 0.25 * voiced * envelope + 0.01 * rng.standard_normal(t.size)
    return (np.clip(audio, -1, 1) * 32767).astype(np.int16)


def _tokenizer_model() -> Any:
    """Stand-in for speech_tokenizer_v1.onnx: whisper mel (1, 128, T) + length -> (1, T/2) ids."""
    import torch

    class Tokenizer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv1d(128, SPEECH_TOKEN_SIZE, kernel_size=2, stride=2)

        def forward(self, feats: torch.Tensor, feats_length: torch.Tensor) -> torch.Tensor:
            ids = self.conv(feats).argmax(dim=1).to(torch.int32)
            # Use the length input so that the graph keeps it, as the real model has it.
            return ids + (feats_length.sum() * 0).to(torch.int32)

    return Tokenizer()


def build(out_dir: str | Path, *, instruct: bool = False, seed: int = 1234, name: str | None = None) -> Path:
    """Write the tiny model to ``out_dir/<name>`` and return that directory.

    ``name`` defaults to ``CosyVoice-300M-tiny`` (or ``CosyVoice-300M-Instruct-tiny``):
    CosyVoice enables ``inference_instruct`` only when the directory name holds
    ``-Instruct``.
    """
    import torch
    from hyperpyyaml import load_hyperpyyaml

    started = time.perf_counter()
    target = Path(out_dir) / (name or ("CosyVoice-300M-Instruct-tiny" if instruct else "CosyVoice-300M-tiny"))
    target.mkdir(parents=True, exist_ok=True)
    text = _YAML.format(w=_WIDTH, units=2 * _WIDTH, text_tokens=_text_token_count(), speech_tokens=SPEECH_TOKEN_SIZE)
    (target / "cosyvoice.yaml").write_text(text, encoding="utf-8")

    torch.manual_seed(seed)
    configs = load_hyperpyyaml(text)
    for part in ("llm", "flow", "hift"):
        module = configs[part]
        with torch.no_grad():
            for param in module.parameters():
                # Default inits give near-silent or exploding output at this size; a plain,
                # seeded normal init keeps every stage finite.
                param.copy_(torch.randn_like(param) * 0.1)
        torch.save(module.state_dict(), target / f"{part}.pt")

    export_onnx(
        speaker_model(),
        (torch.randn(1, 50, 80),),
        target / "campplus.onnx",
        ["input"],
        ["output"],
        {"input": {1: "frames"}},
    )
    export_onnx(
        _tokenizer_model(),
        (torch.randn(1, 128, 100), torch.tensor([100], dtype=torch.int32)),
        target / "speech_tokenizer_v1.onnx",
        ["feats", "feats_length"],
        ["indices"],
        {"feats": {2: "frames"}, "indices": {1: "tokens"}},
    )

    generator = torch.Generator().manual_seed(seed + 1)
    spk2info = {spk: {"embedding": torch.randn(1, 192, generator=generator)} for spk in PRESET_SPEAKERS}
    torch.save(spk2info, target / "spk2info.pt")
    _LOGGER.info("built %s in %.1f s", target, time.perf_counter() - started)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", help="directory to write the model directory into")
    parser.add_argument("--instruct", action="store_true", help="name it as an -Instruct model")
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    path = build(args.out_dir, instruct=args.instruct, seed=args.seed)
    size = sum(f.stat().st_size for f in path.iterdir())
    print(f"{path} ({size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
