from support.mocker import make_engine  # noqa: F401 - the fixture, shared by the engine tests
