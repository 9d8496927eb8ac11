"""The PyTorch models that cases train: a decoder-only transformer language model, an
encoder-decoder that can share one embedding, and torchvision's ResNet50; with synthetic data.

The transformer has no batch statistics (LayerNorm, no dropout), so a batch split into
micro-batches or over GPUs computes the same gradients as the whole batch: the property that
data parallel, model parallel and gradient accumulation are tested against. Its blocks are a
plain ``nn.ModuleList`` so that a case can checkpoint them one by one or cut the model into
consecutive stages. torch and torchvision are imported when a model is built, not before.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LMConfig:
    vocab: int = 32000
    width: int = 1024
    depth: int = 12
    heads: int = 16
    seq_len: int = 1024
    tie_embeddings: bool = False

    def __post_init__(self):
        if self.width % self.heads:
            raise ValueError(f"width {self.width} must be a multiple of heads {self.heads}")


def _torch():
    from harness.measure.guards.requirements import need_module
    return need_module("torch", "pip install 'oombench[torch]'")


def transformer_lm(config: LMConfig, seed: int = 0):
    """A pre-norm decoder-only language model; ``model(tokens)`` returns logits (batch, seq, vocab)."""
    torch = _torch()
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(config.width), nn.LayerNorm(config.width)
            self.attn = nn.MultiheadAttention(config.width, config.heads, batch_first=True)
            self.mlp = nn.Sequential(nn.Linear(config.width, 4 * config.width), nn.GELU(),
                                     nn.Linear(4 * config.width, config.width))

        def forward(self, x):
            n = x.shape[1]
            causal = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1)
            h = self.norm1(x)
            # is_causal: SDPA then applies the causal mask itself (flash or memory-efficient kernels)
            # instead of holding an n x n float mask per layer for backward.
            x = x + self.attn(h, h, h, attn_mask=causal, need_weights=False, is_causal=True)[0]
            return x + self.mlp(self.norm2(x))

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(config.vocab, config.width)
            self.position = nn.Embedding(config.seq_len, config.width)
            self.blocks = nn.ModuleList(Block() for _ in range(config.depth))
            self.norm = nn.LayerNorm(config.width)
            self.head = nn.Linear(config.width, config.vocab, bias=False)
            if config.tie_embeddings:
                self.head.weight = tied_weight(self.embed)  # one storage for input and output embedding

            # Set by the checkpointing technique: recompute each block's activations in backward.
            self.checkpoint_blocks = False
            # Set by the chunked loss: the forward stops before the output projection, which the
            # loss applies chunk by chunk (``harness.workloads.training.chunked``).
            self.head_in_loss = False

        def forward(self, tokens):
            return self.forward_embedded(self.embed(tokens))

        def forward_embedded(self, x):
            """From the token embeddings on: lets the embedding live on another device."""
            positions = torch.arange(x.shape[1], device=x.device)
            x = x + self.position(positions)
            for block in self.blocks:
                x = run_block(block, x, checkpointed=self.checkpoint_blocks)
            x = self.norm(x)
            return x if self.head_in_loss else self.head(x)

    torch.manual_seed(seed)
    return LM()


def tied_weight(embed):
    """The embedding's weight, rescaled to serve as the output projection too. nn.Embedding
    starts at N(0, 1), which as a head gives logits of size sqrt(width) and a first loss several
    times the untied model's; N(0, 1/width) gives the unit-size logits of nn.Linear's own start
    (GPT-2 and T5 likewise start tied embeddings small)."""
    import torch
    with torch.no_grad():
        embed.weight.mul_(embed.weight.shape[1] ** -0.5)
    return embed.weight


def run_block(block, *args, checkpointed: bool = False, **kwargs):
    """``block(*args, **kwargs)``, its activations recomputed in backward when ``checkpointed``.
    Non-reentrant checkpointing: the form PyTorch recommends, and it works with kwargs and
    inputs that do not require grad."""
    if not checkpointed:
        return block(*args, **kwargs)
    from torch.utils.checkpoint import checkpoint
    return checkpoint(block, *args, use_reentrant=False, **kwargs)


@dataclass(frozen=True)
class EncDecConfig:
    vocab: int = 32000
    width: int = 512
    depth: int = 6  # encoder layers, and as many decoder layers
    heads: int = 8
    seq_len: int = 512
    shared_embedding: bool = False  # one matrix for encoder input, decoder input and output

    def __post_init__(self):
        if self.width % self.heads:
            raise ValueError(f"width {self.width} must be a multiple of heads {self.heads}")


def encoder_decoder(config: EncDecConfig, seed: int = 0):
    """A pre-norm transformer encoder-decoder; ``model(source, target_in)`` returns logits
    (batch, target_len, vocab). With ``shared_embedding`` the encoder's and decoder's input
    embeddings and the output projection are one parameter, as in the original Transformer."""
    torch = _torch()
    nn = torch.nn

    def layer(kind):
        return kind(config.width, config.heads, 4 * config.width, dropout=0.0, activation="gelu",
                    batch_first=True, norm_first=True)

    class EncDec(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(config.vocab, config.width)
            self.target_embed = self.embed if config.shared_embedding else nn.Embedding(config.vocab, config.width)
            self.position = nn.Embedding(config.seq_len, config.width)
            self.encoder = nn.ModuleList(layer(nn.TransformerEncoderLayer) for _ in range(config.depth))
            self.decoder = nn.ModuleList(layer(nn.TransformerDecoderLayer) for _ in range(config.depth))
            self.norm_memory, self.norm = nn.LayerNorm(config.width), nn.LayerNorm(config.width)
            self.head = nn.Linear(config.width, config.vocab, bias=False)
            if config.shared_embedding:
                self.head.weight = tied_weight(self.embed)
            self.checkpoint_blocks = False

        def _embedded(self, embed, ids):
            return embed(ids) + self.position(torch.arange(ids.shape[1], device=ids.device))

        def forward(self, source, target_in):
            memory = self._embedded(self.embed, source)
            for block in self.encoder:
                memory = run_block(block, memory, checkpointed=self.checkpoint_blocks)
            memory = self.norm_memory(memory)
            n = target_in.shape[1]
            causal = torch.ones(n, n, dtype=torch.bool, device=target_in.device).triu(1)
            x = self._embedded(self.target_embed, target_in)
            for block in self.decoder:
                x = run_block(block, x, memory, checkpointed=self.checkpoint_blocks, tgt_mask=causal,
                              tgt_is_causal=True)
            return self.head(self.norm(x))

    torch.manual_seed(seed)
    return EncDec()


def resnet50(num_classes: int = 1000, seed: int = 0):
    """torchvision's ResNet50, randomly initialised (no weights are downloaded)."""
    torch = _torch()
    from harness.measure.guards.requirements import need_module
    models = need_module("torchvision.models", "pip install torchvision (the build that matches torch)")
    torch.manual_seed(seed)
    return models.resnet50(weights=None, num_classes=num_classes)


def tokens(batch: int, seq_len: int, vocab: int, seed: int = 0, device="cpu"):
    """Random token ids and their next-token targets, (batch, seq_len) each."""
    torch = _torch()
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (batch, seq_len + 1), generator=gen)
    return ids[:, :-1].to(device), ids[:, 1:].to(device)


def images(batch: int, size: int, classes: int, seed: int = 0, device="cpu"):
    """Random images (batch, 3, size, size) and one-hot labels (batch, classes), as in the
    well-known model-parallel ResNet50 example (MSE against one-hot)."""
    torch = _torch()
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 3, size, size, generator=gen)
    labels = torch.randint(0, classes, (batch,), generator=gen)
    one_hot = torch.zeros(batch, classes).scatter_(1, labels[:, None], 1.0)
    return x.to(device), one_hot.to(device)


def parameter_count(model) -> int:
    """Distinct parameters: a tied weight counts once."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


# ---- the same models as a sequence of layers, for model parallelism --------------------------

def blocks(model) -> list:
    """The blocks a model is built of, each checkpointed or offloaded as one unit: the LM's
    transformer blocks, the encoder-decoder's layers, the bottlenecks of ResNet's four stages."""
    if hasattr(model, "blocks"):
        return list(model.blocks)
    if hasattr(model, "encoder"):
        return [*model.encoder, *model.decoder]
    return [b for name in ("layer1", "layer2", "layer3", "layer4") for b in getattr(model, name, ())]


def lm_layers(model) -> list:
    """The LM as consecutive layers (embedding, each block, norm and head) that share the
    model's parameters: run in sequence they compute ``model(tokens)`` exactly."""
    torch = _torch()
    nn = torch.nn

    class Embed(nn.Module):
        def __init__(self, embed, position):
            super().__init__()
            self.embed, self.position = embed, position

        def forward(self, tokens):
            positions = torch.arange(tokens.shape[1], device=tokens.device)
            return self.embed(tokens) + self.position(positions)

    head = nn.Sequential(model.norm, model.head)
    return [Embed(model.embed, model.position), *model.blocks, head]


def resnet_layers(model) -> list:
    """torchvision's ResNet as consecutive layers: the stem's modules, each bottleneck block of
    the four stages, pooling, flatten and the classifier (what ``ResNet.forward`` runs)."""
    torch = _torch()
    stem = [model.conv1, model.bn1, model.relu, model.maxpool]
    blocks = [b for stage in (model.layer1, model.layer2, model.layer3, model.layer4) for b in stage]
    return [*stem, *blocks, model.avgpool, torch.nn.Flatten(1), model.fc]
