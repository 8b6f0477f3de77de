/* bench-mpi-allreduce.c — MPI_Allreduce (float32, sum) bus bandwidth, the
 * reference bench-comm's all_reduce is compared with. Built and run by
 * bench/run-bench-comm.sh with the system's mpicc and mpirun (Open MPI),
 * outside of `make`: libmixprec does not depend on MPI.
 *
 *   mpirun -np 2 bench-mpi-allreduce [MIN_BYTES MAX_BYTES ITERATIONS]
 *
 * Rank 0 prints "mpi_all_reduce <bytes> <us> <algbw> <busbw>" per size,
 * tab-separated, timed the way bench-comm times: a barrier, then one
 * collective, the median over the runs. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int
compare_doubles (const void *a,
                 const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;

  return (x > y) - (x < y);
}

int
main (int argc, char **argv)
{
  long long min_size = 4096, max_size = 256LL << 20;
  int iterations = 20, rank, world;
  float *send, *recv;

  MPI_Init (&argc, &argv);
  MPI_Comm_rank (MPI_COMM_WORLD, &rank);
  MPI_Comm_size (MPI_COMM_WORLD, &world);
  if (argc == 4)
    {
      min_size = atoll (argv[1]);
      max_size = atoll (argv[2]);
      iterations = atoi (argv[3]);
    }
  send = malloc (max_size);
  recv = malloc (max_size);
  if (send == NULL || recv == NULL)
    MPI_Abort (MPI_COMM_WORLD, 1);
  for (long long i = 0; i < max_size / 4; i++)
    {
      send[i] = (float) ((i + rank) % 1000) * 0.001f;
      recv[i] = 0;
    }

  for (long long bytes = min_size; bytes <= max_size; bytes *= 2)
    {
      int count = (int) (bytes / 4);
      double scale = (double) (1 << 20) / (double) bytes;
      int runs = (int) (iterations * (scale > 1 ? (scale > 16 ? 16 : scale) : scale));
      double *times, t;

      if (runs < 5)
        runs = 5;
      times = malloc (runs * sizeof *times);
      for (int w = 0; w < 3; w++)
        MPI_Allreduce (send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      for (int i = 0; i < runs; i++)
        {
          double start;

          MPI_Barrier (MPI_COMM_WORLD);
          start = MPI_Wtime ();
          MPI_Allreduce (send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
          times[i] = MPI_Wtime () - start;
        }
      qsort (times, runs, sizeof *times, compare_doubles);
      t = times[runs / 2];
      MPI_Bcast (&t, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
      if (rank == 0)
        printf ("mpi_all_reduce\t%lld\t%.2f\t%.3f\t%.3f\n", bytes, t * 1e6, bytes / t / 1e9,
                bytes / t / 1e9 * 2.0 * (world - 1) / world);
      free (times);
    }
  free (send);
  free (recv);
  MPI_Finalize ();
  return 0;
}
