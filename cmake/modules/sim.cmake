# The simulator CLI tests need the CLI built first.
if(TARGET test_cli_sim AND TARGET teraio_cli)
    add_dependencies(test_cli_sim teraio_cli)
endif()
