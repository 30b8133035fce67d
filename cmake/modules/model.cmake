# teraio model: the CLI test runs the built CLI, so build it first.
if(TARGET test_cli_model AND TARGET teraio_cli)
    add_dependencies(test_cli_model teraio_cli)
endif()
