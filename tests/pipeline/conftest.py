from support.mocker import make_engine  # noqa: F401 - the fixture, for the prompt logprobs test
