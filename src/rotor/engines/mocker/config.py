"""MockerConfig: the simulated engine's size limits and its cost model.

The defaults describe a mid-sized model on one GPU, so a mocker behind a
frontend streams at a believable pace (~100 tokens/s per request at batch 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from rotor.protocol.kv import Medium

# vLLM's scheduling policies: first come, first served, or by request priority
# (lower first, ties by arrival), preempting the lowest priority first.
SchedulingPolicy = Literal["fcfs", "priority"]
SCHEDULING_POLICIES: tuple[str, ...] = get_args(SchedulingPolicy)

# A Llama-3-8B's KV cache per token: 32 layers × 2 × 8 KV heads × 128 head dim × 2 bytes.
DEFAULT_KV_BYTES_PER_TOKEN = 131072
# Bringing KV back to the device: from pinned host memory over PCIe 4.0 x16
# (32 GB/s a direction on the wire, ~25 GB/s in copies), and from an NVMe SSD
# (a PCIe 4.0 x4 drive reads ~7 GB/s at best, ~3-5 GB/s through a filesystem).
DEFAULT_HOST_KV_GBPS = 25.0
DEFAULT_DISK_KV_GBPS = 5.0


@dataclass(slots=True)
class MockerConfig:
    max_num_seqs: int = 256  # running sequences at once
    max_num_batched_tokens: int = 8192  # tokens computed per step (prefill chunks + decodes)
    scheduling_policy: SchedulingPolicy = "fcfs"
    block_size: int = 16  # tokens per KV block
    num_kv_blocks: int = 8192
    # Simulated time is divided by this before sleeping; 0 = never sleep.
    speedup_ratio: float = 1.0
    # At ratio 0: steps run back to back this long before the event loop's
    # turn (their outputs reach a reader together); 0 = the loop's turn after
    # every step, the engine then waiting for the frontend as it goes.
    step_slice_ms: float = 1.0
    prefill_overhead_ms: float = 2.0  # fixed cost of a step that prefills anything
    prefill_ms_per_token: float = 0.05
    decode_ms_per_step: float = 10.0  # a decode step at batch 1
    decode_ms_per_seq: float = 0.05  # each further sequence in the decode batch
    # Disaggregated serving: a prefill's pinned blocks are freed after this
    # long unfetched (0: only when fetched or dropped); a decode worker's
    # fetch costs tokens × kv_bytes_per_token / bandwidth of simulated time
    # (bandwidth 0: instant).
    kv_hold_timeout_s: float = 30.0
    kv_transfer_gbps: float = 25.0
    kv_bytes_per_token: int = DEFAULT_KV_BYTES_PER_TOKEN
    # KV tiers below the device (0 blocks: none): what the device evicts moves
    # to the host, the host's to disk; a prompt's blocks found there are
    # brought back at block_size × kv_bytes_per_token / bandwidth each, added
    # to the step that admits it. PCIe 4.0 x16 moves ~25 GB/s of host memory to
    # a GPU; an NVMe SSD reads ~3-5 GB/s (docs/scale-out.md#kv-below-the-device).
    host_kv_blocks: int = 0
    disk_kv_blocks: int = 0
    host_kv_gbps: float = DEFAULT_HOST_KV_GBPS
    disk_kv_gbps: float = DEFAULT_DISK_KV_GBPS
    eos_probability: float = 0.02  # per generated token, seeded output only
    structural_tags: bool = True  # advertised on the card (the mocker never enforces it)
    seed: int = 0
    # `--runner pooling`: an embedding model of this many dimensions, which
    # cannot generate (0: `--runner generate`, which cannot embed)
    embedding_dim: int = 0
    # `--runner pooling --convert classify`: a cross-encoder (a reranker) that
    # scores pairs and neither generates nor embeds
    scores_pairs: bool = False
    # Simulated time a LoRA adapter takes to load (read and move its weights)
    lora_load_ms: float = 50.0
    # A fault: the step loop stops after this many steps (0: never), for
    # `wedge_seconds` of wall time (0: until switched off: MockerEngine.unwedge)
    wedge_after_steps: int = 0
    wedge_seconds: float = 0.0

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size", "num_kv_blocks"):
            if getattr(self, name) < 1:
                raise ValueError(f"mocker {name} must be at least 1, got {getattr(self, name)}")
        if self.scheduling_policy not in SCHEDULING_POLICIES:
            raise ValueError(
                f"mocker scheduling_policy must be one of {', '.join(SCHEDULING_POLICIES)},"
                f" got {self.scheduling_policy!r}"
            )
        if self.speedup_ratio < 0:
            raise ValueError(f"mocker speedup_ratio must be >= 0, got {self.speedup_ratio}")
        if not self.step_slice_ms >= 0:
            raise ValueError(f"mocker step_slice_ms must be >= 0, got {self.step_slice_ms}")
        for name in (
            "kv_hold_timeout_s",
            "kv_transfer_gbps",
            "kv_bytes_per_token",
            "lora_load_ms",
            "host_kv_blocks",
            "disk_kv_blocks",
            "wedge_after_steps",
            "wedge_seconds",
        ):
            if not getattr(self, name) >= 0:
                raise ValueError(f"mocker {name} must be >= 0, got {getattr(self, name)}")
        for name in ("host_kv_gbps", "disk_kv_gbps"):  # a load is never free
            if not getattr(self, name) > 0:
                raise ValueError(f"mocker {name} must be > 0, got {getattr(self, name)}")
        if not 0.0 <= self.eos_probability <= 1.0:
            raise ValueError(
                f"mocker eos_probability must be in [0, 1], got {self.eos_probability}"
            )

    @property
    def capacity_tokens(self) -> int:
        """The most tokens the whole KV cache can hold (one sequence alone)."""
        return self.num_kv_blocks * self.block_size

    def load_ms(self, medium: Medium, blocks: int) -> float:
        """Simulated time of bringing `blocks` blocks from a lower medium back
        to the device: their bytes over the medium's bandwidth."""
        gbps = self.host_kv_gbps if medium == "host" else self.disk_kv_gbps
        return blocks * self.block_size * self.kv_bytes_per_token / (gbps * 1e6)

    def step_ms(self, prefill_tokens: int, decode_seqs: int) -> float:
        """Simulated duration of one step that prefills and decodes this much."""
        ms = 0.0
        if prefill_tokens:
            ms += self.prefill_overhead_ms + self.prefill_ms_per_token * prefill_tokens
        if decode_seqs:
            ms += self.decode_ms_per_step + self.decode_ms_per_seq * (decode_seqs - 1)
        return ms
