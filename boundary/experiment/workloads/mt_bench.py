"""MT-bench: 80 two-turn questions. GPT-4's reference answers where MT-bench ships them
(30 questions); the other answers are synthesised (seeded), as the provenance says.

Where it sits: the experiment's request stage: a shipped conversation source;
``workloads.build_stream`` calls it.
"""

from __future__ import annotations

from boundary.datasets import mt_bench_questions, mt_bench_reference_answers
from boundary.experiment.workloads.script import SessionScript, session_rng, synthetic_reasoning


def scripts(seed: int = 0) -> list[SessionScript]:
    answers = mt_bench_reference_answers()
    vocabulary = " ".join(t for a in answers.values() for t in a).split()
    out = []
    for q in mt_bench_questions():
        qid = q["question_id"]
        name = f"mt_bench_{qid:03d}"
        reference = answers.get(qid)
        rng = session_rng(seed, name, "answers")
        replies = reference or [synthetic_reasoning(rng, vocabulary, (60, 260)) for _ in q["turns"]]
        messages = []
        for user, reply in zip(q["turns"], replies, strict=True):
            messages.append({"role": "user", "content": user})
            messages.append({"role": "assistant", "content": reply})
        out.append(SessionScript(name, messages, None, () if reference else ("assistant answers",)))
    return out
