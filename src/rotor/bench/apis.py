"""The APIs `rotor bench` drives and their paths under the base URL (kept apart
from client.py so that parsing flags imports nothing heavy)."""

APIS = ("chat", "completions", "messages", "responses")
PATHS = {
    "chat": "/chat/completions",
    "completions": "/completions",
    "messages": "/messages",
    "responses": "/responses",
}
TOOL_APIS = ("chat", "messages", "responses")
IMAGE_APIS = ("chat", "messages", "responses")
