"""Sessions: consecutive requests of one conversation rendered incrementally, the previous
request's ids and unchanged message-loop iterations reused.

Where it sits: after ``boundary.renderer`` (a session renders through it); the family facade
hands sessions to frontends.
"""
