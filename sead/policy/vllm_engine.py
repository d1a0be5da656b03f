"""The agent on vLLM's offline engine (GPU machines, `eval.backend=vllm`), token in, token out.

Built against vLLM 0.24 (requirements_vllm.txt): `vllm.LLM`, `vllm.SamplingParams` and `LLM.generate` with
token prompts given as `{"prompt_token_ids": [...]}` (the TokensPrompt TypedDict). The runner keeps the ids
vLLM sampled, exactly as with the transformers backend.
"""

from __future__ import annotations

from sead.dialogue.agent import AgentOutput, AgentRequest, BatchingPolicy
from sead.errors import SEADInputError
from sead.policy.settings import SamplingConfig


class VLLMPolicy(BatchingPolicy):
    name = "vllm"

    def __init__(
        self,
        model_path: str,
        tokenizer,
        sampling: SamplingConfig,
        *,
        max_batch: int = 256,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.85,
        max_model_len: int | None = None,
    ):
        super().__init__(max_batch)
        try:
            import vllm
        except ImportError:
            raise SEADInputError(
                "eval.backend=vllm needs vLLM in this environment (pip install -r "
                "requirements_vllm.txt on a GPU machine); eval.backend=transformers works "
                "everywhere",
                field="eval.backend",
            ) from None
        self._vllm = vllm
        self.tokenizer, self.sampling, self.model_path = tokenizer, sampling, model_path
        self.llm = vllm.LLM(
            model=model_path,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
        )

    def params(self, request: AgentRequest):
        s = self.sampling
        return self._vllm.SamplingParams(
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k if s.top_k > 0 else -1,
            max_tokens=request.max_new_tokens,
            seed=int(request.seed) & 0x7FFFFFFF,
            logprobs=0,
            stop_token_ids=[self.tokenizer.eos_token_id],
        )

    def sample(self, requests: list[AgentRequest]) -> list[AgentOutput]:
        outs = self.llm.generate(
            [{"prompt_token_ids": list(r.prompt_ids)} for r in requests],
            [self.params(r) for r in requests],
            use_tqdm=False,
        )
        return [self._output(o.outputs[0]) for o in outs]

    def _output(self, completion) -> AgentOutput:
        ids = list(completion.token_ids)
        logps = [next(iter(step.values())).logprob if step else 0.0 for step in (completion.logprobs or [])]
        logps = logps if len(logps) == len(ids) else None
        eos = self.tokenizer.eos_token_id
        if completion.finish_reason == "stop" and (not ids or ids[-1] != eos):
            # The runner closes a turn on the end-of-turn id; vLLM may leave the stop token out of the ids.
            ids.append(eos)
            logps = None if logps is None else logps + [0.0]
        return AgentOutput(ids, logps)

    def identity(self) -> dict:
        return {"name": self.name, "model": self.model_path, "sampling": vars(self.sampling)}
