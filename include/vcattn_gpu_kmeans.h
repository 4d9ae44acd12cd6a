/* vcattn_gpu_kmeans.h - kept for existing includes: everything is in vcattn.h. */
#include "vcattn.h"
