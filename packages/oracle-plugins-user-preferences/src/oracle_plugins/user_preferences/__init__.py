"""``user-preferences``: the user's preferences for the oracle, applied to every turn.

The tool ``set_user_preferences`` saves the oracle's name, language, tone, formality and
standing instructions for the user; they are read before each turn into
``state.user_preferences`` (the prompt's "User Preferences" section) and served by
``GET /user-preferences``. They live in the user's Matrix room as ``ixo.room.state`` /
``user_prefs`` (``{data: base64(zlib(superjson(prefs)))}``, as the TypeScript runtime
stores them), or in SQLite under ``SQLITE_DATABASE_PATH`` with ``ORACLE_BACKEND=local``.
"""

from oracle_plugins.user_preferences._codec import (
    STATE_EVENT_TYPE,
    STATE_KEY,
    PreferencesFormatError,
    decode_content,
    decode_data,
    encode_content,
    encode_data,
)
from oracle_plugins.user_preferences._plugin import ROUTE_PATH, TOOL_NAME, UserPreferencesPlugin
from oracle_plugins.user_preferences._record import (
    PREFERENCE_FIELDS,
    SetUserPreferencesArgs,
    merge_record,
    normalise_record,
    state_view,
)
from oracle_plugins.user_preferences._stores import (
    CACHE_SECONDS,
    DATABASE_FILE,
    MatrixRoomPreferences,
    PreferencesStore,
    RoomCache,
    SqlitePreferences,
    open_store,
)
from oracle_plugins.user_preferences._superjson import (
    SuperJSONError,
    js_iso_string,
    superjson_dumps,
    superjson_loads,
)

__all__ = [
    "CACHE_SECONDS",
    "DATABASE_FILE",
    "PREFERENCE_FIELDS",
    "ROUTE_PATH",
    "STATE_EVENT_TYPE",
    "STATE_KEY",
    "TOOL_NAME",
    "MatrixRoomPreferences",
    "PreferencesFormatError",
    "PreferencesStore",
    "RoomCache",
    "SetUserPreferencesArgs",
    "SqlitePreferences",
    "SuperJSONError",
    "UserPreferencesPlugin",
    "decode_content",
    "decode_data",
    "encode_content",
    "encode_data",
    "js_iso_string",
    "merge_record",
    "normalise_record",
    "open_store",
    "plugin",
    "state_view",
    "superjson_dumps",
    "superjson_loads",
]

plugin = UserPreferencesPlugin()
"""The instance the ``oracle.plugins`` entry point ``user-preferences`` names."""
