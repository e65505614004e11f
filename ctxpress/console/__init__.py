"""The team console (``ctxpress console``): a small server-rendered web application for a team's lead.

One module per concept: ``app`` (the aiohttp application and its server), ``auth`` (passwords, tokens, CSRF and
the sign-in rate limit: pure logic), ``guard`` (sessions, CSRF and security headers as middleware), ``admins``
(``ctxpress users admin``), ``downloads`` (credentials files offered once), ``status`` (the overview's snapshot),
``charts`` (server-rendered SVG), and a module of routes per page (``page_*``). Every action calls the same library
function as the CLI (``ctxpress.members``, ``ctxpress.dead_letters``, ``ctxpress.search``).
"""
