"""Models brought to `harness try` by the tests: a small one that trains, and factories that are wrong
in each way the command refuses."""
import torch

VOCAB, WIDTH, SEQ = 64, 32, 16


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = torch.nn.Sequential(torch.nn.LayerNorm(WIDTH), torch.nn.Linear(WIDTH, 2 * WIDTH), torch.nn.GELU(),
                                       torch.nn.Linear(2 * WIDTH, WIDTH))

    def forward(self, x):
        return x + self.mlp(x)


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.layers = torch.nn.ModuleList(Block() for _ in range(3))
        self.head = torch.nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def tokens(seq_len):
    def batch(n, device):
        g = torch.Generator().manual_seed(0)
        x = torch.randint(0, VOCAB, (n, seq_len + 1), generator=g)
        return x[:, :-1].to(device), x[:, 1:].to(device)
    return batch


def tiny(seq_len=SEQ):
    return {"model": Tiny(), "batch": tokens(seq_len), "lr": 1e-2}


def raises(seq_len=SEQ):
    raise RuntimeError("no weights here")


def not_a_model():
    return {"model": "tiny", "batch": tokens(SEQ)}


def wrong_targets():
    """Targets of another length than the logits: the default loss cannot take them."""
    def batch(n, device):
        return torch.zeros(n, SEQ, dtype=torch.long), torch.zeros(n, SEQ + 3, dtype=torch.long)
    return Tiny(), batch


def nan_loss():
    return {"model": Tiny(), "batch": tokens(SEQ), "loss": lambda out, t: out.sum() * float("nan")}


def tiny_llama(seq_len=SEQ):
    """A two-layer Llama-style decoder from transformers' config class, as the built-in llama-1b is
    built, small enough for a step in milliseconds; its projections hold whole NF4 blocks (128 x 128)."""
    from harness.workloads.training.user_model import _causal
    return _causal("LlamaConfig", "LlamaForCausalLM", VOCAB, 128, seq_len, hidden_size=128, num_hidden_layers=2,
                   num_attention_heads=4, intermediate_size=256, max_position_embeddings=seq_len) | {"lr": 1e-2}
