"""Build tiny random-weight CosyVoice2 and CosyVoice3 model directories for tests and benchmarks.

The released CosyVoice2-0.5B and Fun-CosyVoice3-0.5B are gigabytes and cannot be
downloaded here, yet the engine must run them through the real upstream code (the Qwen2
LLM, the causal flow or DiT, HiFT, the frontend, the speaker table). So this script writes
a directory in the exact published layout, every network shrunk and randomly initialised::

    cosyvoice2.yaml | cosyvoice3.yaml     the inference sections of the released yaml, shrunk
    llm.pt flow.pt hift.pt                state dicts, as upstream's CosyVoiceModel.load reads them
    campplus.onnx                         speaker model stand-in: (1, T, 80) fbank -> (1, 192)
    speech_tokenizer_v2.onnx | _v3.onnx   tokenizer stand-in: whisper mel (1, 128, T) -> (1, T/4) ids, 25 Hz
    spk2info.pt                           one preset speaker, saved from a prompt (as save_spkinfo does)
    CosyVoice-BlankEN/                    a tiny Qwen2: config.json, generation_config.json, model.safetensors,
                                          vocab.json, merges.txt, tokenizer_config.json

Regenerate by hand (about 5-10 s each; needs the CosyVoice stack and the upstream source)::

    python tests/cosyvoice2_fixture.py OUTDIR --family v2 --repo-dir ../shared/upstream/CosyVoice
    python tests/cosyvoice2_fixture.py OUTDIR --family v3 --repo-dir ../shared/upstream/CosyVoice

The tests call :func:`build` into a session temporary directory; nothing is committed.
The weights are a pure function of ``seed``.

Kept at real size, because the code hard-wires it: 24,000 Hz output, 80 mel bins at 50 frames
a second (hop 480), 25 speech tokens a second (two mel frames each), 6,561 speech tokens,
192-d speaker embeddings, the 128-bin whisper mel the speech tokenizer reads, and the Qwen2
text vocabulary of 151,936 ids: CosyVoice's tokenizer adds its special tokens after Qwen's
own (``<|endoftext|>`` = 151643 ...), and CosyVoice3's LLM asserts that ``<|endofprompt|>``
is id 151646. So ``vocab.json`` holds 151,643 entries like the real one, but only the 256
byte symbols and a few merges are reachable; the rest are fillers no merge produces.
Shrunk: the Qwen2 is one layer of width 4; the flow encoder / DiT width 16, one block;
HiFT base channels 16. ``CosyVoice-BlankEN/config.json`` says ``torch_dtype: bfloat16`` and
its weights are stored in bfloat16, as in the released models: transformers 5 loads such a
model in bfloat16 unless told otherwise, which the engine must (and does) correct.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from cosyvoice_fixture import export_onnx, prompt_pcm, speaker_model

_LOGGER = logging.getLogger(__name__)

__all__ = ["FAMILIES", "PRESET_SPEAKER", "SPEECH_TOKENS", "build", "prompt_pcm"]

#: The one speaker of spk2info.pt.
PRESET_SPEAKER = "preset-qwen"
#: Speech-token vocabulary (as released).
SPEECH_TOKENS = 6561
FAMILIES = ("v2", "v3")

_QWEN_WIDTH = 4
_WIDTH = 16
_QWEN_VOCAB = 151_936
_QWEN_BASE = 151_643  # <|endoftext|>; the real vocab.json holds ids 0 .. 151642
_QWEN_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

_COMMON_HEAD = """\
# Tiny random-weight {model} (test fixture, built by tests/cosyvoice2_fixture.py).
# Same structure as the released {config}, inference sections only, shrunk.
sample_rate: 24000
llm_input_size: {qw}
llm_output_size: {qw}
spk_embed_dim: 192
qwen_pretrain_path: ''
token_frame_rate: 25
token_mel_ratio: 2
chunk_size: 25
num_decoding_left_chunks: -1

llm: !new:cosyvoice.llm.llm.{llm_class}
    llm_input_size: !ref <llm_input_size>
    llm_output_size: !ref <llm_output_size>
    speech_token_size: {tokens}
    length_normalized_loss: True
    lsm_weight: 0
    mix_ratio: [5, 15]
    llm: !new:cosyvoice.llm.llm.Qwen2Encoder
        pretrain_path: !ref <qwen_pretrain_path>
    sampling: !name:cosyvoice.utils.common.ras_sampling
        top_p: 0.8
        top_k: 25
        win_size: 10
        tau_r: 0.1
"""

_CFM = """\
    decoder: !new:cosyvoice.flow.flow_matching.CausalConditionalCFM
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
"""

_V2_FLOW = """
flow: !new:cosyvoice.flow.flow.CausalMaskedDiffWithXvec
    input_size: 512
    output_size: 80
    spk_embed_dim: !ref <spk_embed_dim>
    output_type: 'mel'
    vocab_size: {tokens}
    input_frame_rate: !ref <token_frame_rate>
    only_mask_loss: True
    token_mel_ratio: !ref <token_mel_ratio>
    pre_lookahead_len: 3
    encoder: !new:cosyvoice.transformer.upsample_encoder.UpsampleConformerEncoder
        output_size: 512
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
        input_size: 512
        use_cnn_module: False
        macaron_style: False
        use_dynamic_chunk: True
{cfm}        estimator: !new:cosyvoice.flow.decoder.CausalConditionalDecoder
            in_channels: 320
            out_channels: 80
            channels: [{w}]
            dropout: 0.0
            attention_head_dim: 8
            n_blocks: 1
            num_mid_blocks: 1
            num_heads: 2
            act_fn: 'gelu'
            static_chunk_size: !ref <token_frame_rate> * <token_mel_ratio>
            num_decoding_left_chunks: 2

hift: !new:cosyvoice.hifigan.generator.HiFTGenerator
{hift}    f0_predictor: !new:cosyvoice.hifigan.f0_predictor.ConvRNNF0Predictor
        num_class: 1
        in_channels: 80
        cond_channels: {w}

get_tokenizer: !name:cosyvoice.tokenizer.tokenizer.get_qwen_tokenizer
    token_path: !ref <qwen_pretrain_path>
    skip_special_tokens: True
allowed_special: 'all'
feat_extractor: !name:matcha.utils.audio.mel_spectrogram
    n_fft: 1920
    num_mels: 80
    sampling_rate: !ref <sample_rate>
    hop_size: 480
    win_size: 1920
    fmin: 0
    fmax: 8000
    center: False
"""

_V3_FLOW = """
flow: !new:cosyvoice.flow.flow.CausalMaskedDiffWithDiT
    input_size: 80
    output_size: 80
    spk_embed_dim: !ref <spk_embed_dim>
    output_type: 'mel'
    vocab_size: {tokens}
    input_frame_rate: !ref <token_frame_rate>
    only_mask_loss: True
    token_mel_ratio: !ref <token_mel_ratio>
    pre_lookahead_len: 3
    pre_lookahead_layer: !new:cosyvoice.transformer.upsample_encoder.PreLookaheadLayer
        in_channels: 80
        channels: {units}
        pre_lookahead_len: 3
{cfm}        estimator: !new:cosyvoice.flow.DiT.dit.DiT
            dim: {w}
            depth: 1
            heads: 2
            dim_head: 8
            ff_mult: 2
            mel_dim: 80
            mu_dim: 80
            spk_dim: 80
            out_channels: 80
            static_chunk_size: !ref <chunk_size> * <token_mel_ratio>
            num_decoding_left_chunks: !ref <num_decoding_left_chunks>

hift: !new:cosyvoice.hifigan.generator.CausalHiFTGenerator
{hift}    conv_pre_look_right: 4
    f0_predictor: !new:cosyvoice.hifigan.f0_predictor.CausalConvRNNF0Predictor
        num_class: 1
        in_channels: 80
        cond_channels: {w}

get_tokenizer: !name:cosyvoice.tokenizer.tokenizer.get_qwen_tokenizer
    token_path: !ref <qwen_pretrain_path>
    skip_special_tokens: True
    version: cosyvoice3
allowed_special: 'all'
feat_extractor: !name:matcha.utils.audio.mel_spectrogram
    n_fft: 1920
    num_mels: 80
    sampling_rate: !ref <sample_rate>
    hop_size: 480
    win_size: 1920
    fmin: 0
    fmax: null
    center: False
"""

_HIFT = """\
    in_channels: 80
    base_channels: {w}
    nb_harmonics: 8
    sampling_rate: !ref <sample_rate>
    nsf_alpha: 0.1
    nsf_sigma: 0.003
    nsf_voiced_threshold: 10
    upsample_rates: [8, 5, 3]
    upsample_kernel_sizes: [16, 11, 7]
    istft_params:
        n_fft: 16
        hop_len: 4
    resblock_kernel_sizes: [3]
    resblock_dilation_sizes: [[1, 3]]
    source_resblock_kernel_sizes: [7, 7, 11]
    source_resblock_dilation_sizes: [[1, 3], [1, 3], [1, 3]]
    lrelu_slope: 0.1
    audio_limit: 0.99
"""


def yaml_text(family: str) -> str:
    """The model config of ``family`` (``v2`` or ``v3``)."""
    v3 = family == "v3"
    head = _COMMON_HEAD.format(
        model="Fun-CosyVoice3-0.5B" if v3 else "CosyVoice2-0.5B",
        config="cosyvoice3.yaml" if v3 else "cosyvoice2.yaml",
        qw=_QWEN_WIDTH,
        llm_class="CosyVoice3LM" if v3 else "Qwen2LM",
        tokens=SPEECH_TOKENS,
    )
    body = (_V3_FLOW if v3 else _V2_FLOW).format(
        w=_WIDTH, units=2 * _WIDTH, tokens=SPEECH_TOKENS, cfm=_CFM, hift=_HIFT.format(w=_WIDTH)
    )
    return head + body


# --- CosyVoice-BlankEN: a tiny Qwen2 with a real-shaped tokenizer ------------------------


def _byte_symbols() -> list[str]:
    """The 256 symbols of byte-level BPE, in byte order (printable bytes stand for
    themselves, the others are shifted past U+0100), as in GPT-2 and Qwen vocabularies."""
    printable = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    symbols, shifted = [], 0
    for byte in range(256):
        if byte in printable:
            symbols.append(chr(byte))
        else:
            symbols.append(chr(0x100 + shifted))
            shifted += 1
    return symbols


def _write_blank_en(target: Path, seed: int) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    target.mkdir(parents=True, exist_ok=True)
    vocab: dict[str, int] = {symbol: i for i, symbol in enumerate(_byte_symbols())}
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("e", "r"), ("Ġ", "a"), ("o", "u")]
    for left, right in merges:
        vocab[left + right] = len(vocab)
    # Fillers up to Qwen's size, so that the special tokens get Qwen's ids. No merge makes them.
    filler = 0
    while len(vocab) < _QWEN_BASE:
        vocab[f"~{filler:x}"] = len(vocab)
        filler += 1
    (target / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (target / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges), encoding="utf-8")
    added = {
        str(_QWEN_BASE + i): {"content": token, "lstrip": False, "normalized": False, "rstrip": False,
                              "single_word": False, "special": True}
        for i, token in enumerate(_QWEN_SPECIALS)
    }  # fmt: skip
    tokenizer_config = {
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "additional_special_tokens": list(_QWEN_SPECIALS[1:]),
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|endoftext|>",
        "errors": "replace",
        "model_max_length": 32768,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    (target / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2), encoding="utf-8")
    config = Qwen2Config(
        vocab_size=_QWEN_VOCAB,
        hidden_size=_QWEN_WIDTH,
        intermediate_size=2 * _QWEN_WIDTH,
        num_hidden_layers=1,
        num_attention_heads=1,
        num_key_value_heads=1,
        max_position_embeddings=32768,
        max_window_layers=1,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        use_sliding_window=False,
        bos_token_id=_QWEN_BASE,
        eos_token_id=_QWEN_BASE,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(str(target), safe_serialization=True)
    # As released: the config names bfloat16 (what transformers 5 loads by default).
    saved = json.loads((target / "config.json").read_text(encoding="utf-8"))
    saved["torch_dtype"] = "bfloat16"
    saved["dtype"] = "bfloat16"
    (target / "config.json").write_text(json.dumps(saved, indent=2, sort_keys=True), encoding="utf-8")


# --- ONNX stand-ins ------------------------------------------------------------------------


def _tokenizer_model() -> Any:
    """Stand-in for speech_tokenizer_v2/v3.onnx: whisper mel (1, 128, T) + length -> (1, T/4)
    ids in [0, 6561) at 25 Hz, as 81 x 81 (two argmaxes) so the graph stays small."""
    import torch

    class Tokenizer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv1d(128, 2 * 81, kernel_size=4, stride=4)

        def forward(self, feats: torch.Tensor, feats_length: torch.Tensor) -> torch.Tensor:
            out = self.conv(feats)
            high = out[:, :81].argmax(dim=1)
            low = out[:, 81:].argmax(dim=1)
            ids = (high * 81 + low).to(torch.int32)
            return ids + (feats_length.sum() * 0).to(torch.int32)

    return Tokenizer()


def build(out_dir: str | Path, *, family: str = "v2", seed: int = 4321, name: str | None = None) -> Path:
    """Write the tiny model of ``family`` to ``out_dir/<name>`` and return that directory.

    The upstream CosyVoice code (with Qwen2LM) must be importable: put the upstream source
    and its third_party/Matcha-TTS first on ``sys.path`` (``main`` does, from ``--repo-dir``).
    """
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    import torch
    from hyperpyyaml import load_hyperpyyaml

    started = time.perf_counter()
    v3 = family == "v3"
    target = Path(out_dir) / (name or ("Fun-CosyVoice3-0.5B-tiny" if v3 else "CosyVoice2-0.5B-tiny"))
    target.mkdir(parents=True, exist_ok=True)
    config_name = "cosyvoice3.yaml" if v3 else "cosyvoice2.yaml"
    text = yaml_text(family)
    (target / config_name).write_text(text, encoding="utf-8")
    blank = target / "CosyVoice-BlankEN"
    _write_blank_en(blank, seed)

    configs = load_hyperpyyaml(text, overrides={"qwen_pretrain_path": str(blank)})
    torch.manual_seed(seed)
    for part in ("llm", "flow", "hift"):
        module = configs[part].float()
        with torch.no_grad():
            for param in module.parameters():
                # Default inits give near-silent or exploding output at this size; a plain,
                # seeded normal init keeps every stage finite.
                param.copy_(torch.randn_like(param) * 0.1)
            if part == "llm" and not v3:
                # A random Qwen2LM almost never samples its one end-of-speech token and would
                # talk to its length limit (20 tokens per text token); a bias on it ends the
                # speech soon after the minimum (2 per text token), as a trained model does.
                module.llm_decoder.bias[SPEECH_TOKENS] = 4.0
            elif part == "llm":
                # CosyVoice3LM has 200 stop tokens, no bias, and only one is masked before the
                # minimum length: random rows would stop it after a few tokens. With zero rows
                # the stop tokens sit mid-ranking, out of the top-25 nucleus; only the sampler's
                # fall-back to the full distribution (on repetition) reaches them, so speech
                # runs some tens of tokens, varying with text and seed.
                module.llm_decoder.weight[SPEECH_TOKENS:] = 0.0
        # Stored in bfloat16 (upstream's load_state_dict casts to the modules' float32): the
        # v2 flow encoder hard-wires 512 channels (3.1 M weights), and half the bytes keep the
        # directory small.
        halves: dict[int, Any] = {}  # tied weights (Qwen's embedding and head) stay one tensor
        state = {
            key: halves.setdefault(value.data_ptr(), value.to(torch.bfloat16)) if value.is_floating_point() else value
            for key, value in module.state_dict().items()
        }
        torch.save(state, target / f"{part}.pt")
    del configs

    export_onnx(speaker_model(), (torch.randn(1, 50, 80),), target / "campplus.onnx", ["input"], ["output"],
                 {"input": {1: "frames"}})  # fmt: skip
    export_onnx(_tokenizer_model(), (torch.randn(1, 128, 100), torch.tensor([100], dtype=torch.int32)),
                 target / f"speech_tokenizer_{'v3' if v3 else 'v2'}.onnx", ["feats", "feats_length"], ["indices"],
                 {"feats": {2: "frames"}, "indices": {1: "tokens"}})  # fmt: skip
    _write_speaker(target, v3)
    _LOGGER.info("built %s in %.1f s", target, time.perf_counter() - started)
    return target


def _write_speaker(target: Path, v3: bool) -> None:
    """spk2info.pt with one speaker saved from a prompt, the way upstream's
    ``add_zero_shot_spk`` + ``save_spkinfo`` make one (the frontend's own output)."""
    import torch
    from cosyvoice.cli import frontend as frontend_module
    from cosyvoice.cli.cosyvoice import AutoModel

    def load_wav(wav: Any, target_sr: int, min_sr: int = 16000) -> Any:  # in-memory prompt
        import torchaudio.functional

        speech = torch.from_numpy(prompt_pcm(seed=11).astype("float32") / 32768.0).unsqueeze(0)
        return speech if target_sr == 16000 else torchaudio.functional.resample(speech, 16000, target_sr)

    real = frontend_module.load_wav
    frontend_module.load_wav = load_wav  # type: ignore[attr-defined]
    try:
        cosy = AutoModel(model_dir=str(target))
        words = "a saved preset voice"
        prompt_text = f"You are a helpful assistant.<|endofprompt|>{words}" if v3 else words
        cosy.add_zero_shot_spk(prompt_text, "<memory>", PRESET_SPEAKER)
        table = {PRESET_SPEAKER: cosy.frontend.spk2info[PRESET_SPEAKER]}
    finally:
        frontend_module.load_wav = real  # type: ignore[attr-defined]
    torch.save(table, target / "spk2info.pt")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", help="directory to write the model directory into")
    parser.add_argument("--family", choices=FAMILIES, default="v2")
    parser.add_argument("--repo-dir", required=True, help="the upstream CosyVoice source (with third_party/)")
    parser.add_argument("--seed", type=int, default=4321)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    repo = Path(args.repo_dir).resolve()
    sys.path[:0] = [str(repo), str(repo / "third_party" / "Matcha-TTS")]
    path = build(args.out_dir, family=args.family, seed=args.seed)
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    print(f"{path} ({size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
