# Planner area: the CLI tests run the built `teraio` binary.
if(TIO_BUILD_TESTS AND TIO_BUILD_CLI AND TARGET test_cli_plan AND TARGET teraio_cli)
    add_dependencies(test_cli_plan teraio_cli)
endif()
