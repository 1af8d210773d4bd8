"""The render stage: a chat template run once, sandboxed and instrumented, its text and marks read
back into character positions (U_end, message starts, generation spans).

Where it sits: after ``boundary.request`` (a validated request) and before ``boundary.tokenize``
(the text becomes ids); ``boundary.renderer`` drives it.
"""
