"""MT-bench: 80 two-turn questions. GPT-4's reference answers where MT-bench ships them
(30 questions); the other answers are synthesised (seeded), as the provenance says.

Where it sits: the experiment's request stage: a shipped conversation source;
``workloads.build_stream`` calls it.
"""

from __future__ import annotations

from boundary.experiment.workloads.script import SessionScript, session_rng, synthetic_reasoning
from boundary.shipped.datasets import mt_bench_questions, mt_bench_reference_answers


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


def sharegpt_like(conversations: int, seed: int = 0) -> list[SessionScript]:
    """Prose chats shaped like ShareGPT traffic: 3-8 user turns, each an MT-bench question turn
    drawn at random (seeded), answered by MT-bench's GPT-4 reference where it ships one, else by
    seeded synthetic prose; named ``sharegpt_like_NNN``."""
    questions = mt_bench_questions()
    answers = mt_bench_reference_answers()
    vocabulary = " ".join(t for a in answers.values() for t in a).split()
    out = []
    for c in range(conversations):
        name = f"sharegpt_like_{c:03d}"
        rng = session_rng(seed, name, "turns")
        messages: list[dict[str, str]] = []
        synthesised = False
        for _ in range(rng.randint(3, 8)):
            q = rng.choice(questions)
            turn = rng.randrange(len(q["turns"]))
            reference = answers.get(q["question_id"])
            reply = reference[turn] if reference else synthetic_reasoning(rng, vocabulary, (60, 400))
            synthesised = synthesised or not reference
            messages.append({"role": "user", "content": q["turns"][turn]})
            messages.append({"role": "assistant", "content": reply})
        out.append(SessionScript(name, messages, None, ("assistant answers",) if synthesised else ()))
    return out
