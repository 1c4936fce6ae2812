"""``portal``: the browser tools of the user's Portal page, run by the Portal Agent.

A client declares the browser tools it can run on each message (``tools`` in the
message body, ``state.browser_tools`` in the turn). This plugin then gives the model one
sub-agent, ``call_portal_agent``, whose tools are those browser tools; each call runs in
the user's client over the runtime's frontend-call service (``rt_ctx.frontend``).
"""

from oracle_plugins.portal._plugin import SUB_AGENT_NAME, PortalPlugin

__all__ = ["SUB_AGENT_NAME", "PortalPlugin", "plugin"]

plugin = PortalPlugin()
"""The instance the ``oracle.plugins`` entry point ``portal`` names."""
