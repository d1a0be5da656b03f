"""A user simulator running a transformers causal LM in this process: no server, for CPU runs and tests."""

from __future__ import annotations

import threading

from sead import compute
from sead.errors import SEADInputError
from sead.scenario.profiles import Profile
from sead.scenario.scenario import Scenario
from sead.usersim.base import Exchange, SimulatorError, UserReply, UserSimulator, check_settings
from sead.usersim.openai_sim import build_user_messages, turn_seed


class HFUserSimulator(UserSimulator):
    name = "hf"

    def __init__(
        self,
        scenario: Scenario,
        *,
        model_path: str | None = None,
        temperature: float = 0.9,
        top_p: float = 0.95,
        top_k: int = 40,
        max_new_tokens: int = 512,
        device: str = "cpu",
        model=None,
        tokenizer=None,
    ):
        super().__init__(scenario)
        check_settings(temperature=temperature, top_p=top_p, top_k=top_k, max_new_tokens=max_new_tokens)
        if temperature == 0:  # transformers' sampling (do_sample) takes no temperature of 0
            raise SEADInputError("the in-process simulator samples: set it above 0", field="usersim.temperature")
        if model is None or tokenizer is None:
            if not model_path:
                raise SEADInputError("a model folder or hub id is required", field="usersim.model_path")
            from transformers import AutoModelForCausalLM, AutoTokenizer

            try:
                tokenizer = tokenizer or AutoTokenizer.from_pretrained(model_path)
                model = model or AutoModelForCausalLM.from_pretrained(model_path)
            except (OSError, ValueError) as e:  # transformers: no such folder or hub id, or no usable files in it
                raise SEADInputError(f"cannot load {model_path!r}: {e}", field="usersim.model_path") from None
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.model_path = model_path or getattr(model.config, "_name_or_path", "") or type(model).__name__
        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
        self.max_new_tokens, self.device = max_new_tokens, device
        # Seeding and sampling share torch's global RNG, so one generation at a time makes a seed reproducible.
        self._lock = threading.Lock()

    async def respond(self, profile: Profile, history: list[Exchange], agent_response: str, *, seed: int) -> UserReply:
        messages = build_user_messages(self.scenario, profile, history, agent_response)
        return await compute.arun(self._generate, messages, turn_seed(seed, len(history)))

    def _generate(self, messages: list[dict], seed: int) -> UserReply:
        import torch

        inputs = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, return_dict=True, return_tensors="pt"
        ).to(self.device)
        prompt_len = inputs["input_ids"].shape[1]
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        with self._lock, torch.inference_mode():
            torch.manual_seed(seed)
            try:
                out = self.model.generate(
                    **inputs,
                    do_sample=True,
                    temperature=self.temperature,
                    top_p=self.top_p,
                    top_k=self.top_k,
                    max_new_tokens=self.max_new_tokens,
                    eos_token_id=eos,
                    pad_token_id=eos if pad is None else pad,
                )
            except torch.OutOfMemoryError as e:
                raise SimulatorError(f"user simulator {self.model_path} on {self.device} ran out of memory") from e
        new_ids = out[0, prompt_len:].tolist()
        text = self.tokenizer.decode(new_ids, skip_special_tokens=True)
        return UserReply(text, prompt_len, len(new_ids), meta={"model": self.model_path})

    def identity(self) -> dict:
        return {
            "name": self.name,
            "model": self.model_path,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "max_new_tokens": self.max_new_tokens,
            "device": self.device,
        }
