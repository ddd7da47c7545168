"""The workloads: model code run the way a serving or training stack runs it.

Streams (trace stream numbers):
- 0: compute, the current stream.
- 1: copies. The next batch is copied host-to-device on a side stream while
  the current one computes (the prefetching loader pattern:
  `with torch.npu.stream(copy): x = batch.to(dev, non_blocking=True)`, then
  `compute.wait_stream(copy); x.record_stream(compute)`), so each input
  tensor is allocated on stream 1 and recorded on stream 0 (`u`).
- 2: communication (training). Gradients are gathered in buckets as
  backward produces them (a post-accumulate-grad hook on every parameter, in
  the order autograd finishes them); a full bucket is flattened into one
  buffer, the buffer is all-reduced on the communication stream and copied
  back into the gradients, then dropped. torch_npu's ProcessGroupHCCL
  records every collective's inputs on its HCCL stream before launching it,
  so the buffer is recorded on stream 2 (`u`) and its free is deferred until
  that stream passes. Each step ends with the host waiting for the
  communication stream (`w 2`) before the optimizer step.
"""

import torch
from transformers import DynamicCache

from .configs import make_model

COMPUTE, COPY, COMM = 0, 1, 2


def _load(tracker, batch, seq, vocab, labels):
    """One batch copied to the device on the copy stream (token ids, labels)."""
    with tracker.on_stream(COPY):
        ids = torch.randint(0, vocab, (batch, seq))
        lab = torch.randint(0, vocab, (batch, seq)) if labels else None
    return ids, lab


def _use_on_compute(tracker, *tensors):
    for t in tensors:
        if t is not None:
            tracker.record_stream(t, COMPUTE)


def serve(tracker, model_name, requests, layers=None):
    """Greedy generation for each request: (batch, prompt length, new tokens).

    Prefill keeps only the last position's logits (as `generate` does), the
    KV cache is transformers' DynamicCache (grows by concatenation each
    step), and each step's tokens go back to the host (`w 0`), as a server
    checking for end-of-sequence does.
    """
    model = make_model(model_name, layers)
    model.eval()
    vocab = model.config.vocab_size
    with torch.no_grad():
        for batch, prompt, new_tokens in requests:
            ids, _ = _load(tracker, batch, prompt, vocab, labels=False)
            _use_on_compute(tracker, ids)
            cache = DynamicCache(config=model.config)
            out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
            del ids
            for _ in range(new_tokens):
                token = out.logits[:, -1].argmax(-1, keepdim=True)
                del out
                tracker.wait(COMPUTE)
                out = model(input_ids=token, past_key_values=cache, use_cache=True)
                del token
            del out, cache
    return model


class Buckets:
    """Gradient buckets all-reduced on the communication stream as they fill."""

    def __init__(self, tracker, params, cap_bytes, world_size):
        self.tracker = tracker
        self.cap = cap_bytes
        self.world = world_size
        self.ready = []
        self.ready_bytes = 0
        self.count = 0
        for p in params:
            p.register_post_accumulate_grad_hook(self._ready)

    def _ready(self, p):
        self.ready.append(p)
        self.ready_bytes += p.grad.numel() * p.grad.element_size()
        if self.ready_bytes >= self.cap:
            self.flush()

    def flush(self):
        if not self.ready:
            return
        grads = [p.grad for p in self.ready]
        self.ready, self.ready_bytes = [], 0
        flat = torch.cat([g.reshape(-1) for g in grads])
        # ProcessGroupHCCL::collective: recordStream(input, hcclStream), then
        # the all-reduce (in place) on that stream.
        self.tracker.record_stream(flat, COMM)
        flat.div_(self.world)
        offset = 0
        for g in grads:
            n = g.numel()
            g.copy_(flat[offset : offset + n].view_as(g))
            offset += n
        self.count += 1
        del flat


def train(tracker, model_name, steps, batch, seq, layers=None, dtype=torch.bfloat16, bucket_mib=25, world_size=8):
    """Training steps with gradient checkpointing, AdamW and the two side streams."""
    model = make_model(model_name, layers, dtype)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    vocab = model.config.vocab_size
    params = [p for p in model.parameters() if p.requires_grad]
    # The for-loop implementation (torch's default for these tensors): one
    # parameter's temporaries at a time.
    opt = torch.optim.AdamW(params, lr=1e-5, foreach=False)
    buckets = Buckets(tracker, params, bucket_mib << 20, world_size)
    nxt = _load(tracker, batch, seq, vocab, labels=True)
    for step in range(steps):
        ids, labels = nxt
        _use_on_compute(tracker, ids, labels)
        # Prefetch: the next batch is copied while this one computes.
        nxt = _load(tracker, batch, seq, vocab, labels=True) if step + 1 < steps else None
        loss = model(input_ids=ids, labels=labels).loss
        del ids, labels
        loss.backward()
        buckets.flush()
        del loss
        tracker.wait(COMM)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return model, opt, buckets.count
