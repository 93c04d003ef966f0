/*
 * collectives/mpi_none.c - the mpi backend of a build without MPI
 * (SLUICE_WITH_MPI off or OpenMPI not found): sl_comm_mpi_launched still
 * reads the environment, so a tool can say why an mpirun-started job
 * cannot use this build; creating a communicator is SL_ENOTSUP.
 *
 * Threading: no state.
 */
#include <stdlib.h>

#include "collectives/collectives_int.h"

int sl_comm_mpi_launched(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

int sl_comm_mpi_create(const sl_comm_config *cfg, sl_comm **out)
{
    (void)cfg;
    if (out)
        *out = NULL;
    return sl_fail(SL_ENOTSUP, "sl_comm_mpi_create: built without MPI (configure with "
                   "-DSLUICE_WITH_MPI=ON and OpenMPI installed)");
}
