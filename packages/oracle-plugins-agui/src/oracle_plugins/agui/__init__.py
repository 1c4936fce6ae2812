"""``agui``: the AG-UI actions of the user's client, run by the AG-UI Agent.

A client declares the AG-UI actions it can run on each message (``agActions`` in the
message body, ``state.ag_actions`` in the turn). This plugin then gives the model one
sub-agent, ``call_ag-ui_agent``, whose tools are those actions; each call runs in the
client over the runtime's frontend-call service (``rt_ctx.frontend``) and is forwarded
into the parent thread for the client to render.
"""

from oracle_plugins.agui._plugin import SUB_AGENT_NAME, AguiPlugin

__all__ = ["SUB_AGENT_NAME", "AguiPlugin", "plugin"]

plugin = AguiPlugin()
"""The instance the ``oracle.plugins`` entry point ``agui`` names."""
